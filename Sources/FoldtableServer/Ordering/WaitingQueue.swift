/// Changes waiting in arrival order behind a busy section: what both orders keep (a local
/// order its members' changes, a stream order the requests it read). Taken from the front
/// while the front may go on; the handled front is dropped when that is all of it, or more than
/// half of a long queue, so a queue never moves per element.
struct WaitingQueue<Element> {
    private var elements: [Element] = []
    /// The first element not taken yet.
    private var start = 0

    var isEmpty: Bool { start == elements.count }
    var count: Int { elements.count - start }
    /// The element waiting longest, if any.
    var front: Element? { isEmpty ? nil : elements[start] }

    mutating func append(_ element: Element) { elements.append(element) }
    mutating func append(contentsOf more: [Element]) { elements.append(contentsOf: more) }

    /// Takes the front (the caller read it with ``front`` and lets it go on).
    mutating func removeFront() {
        guard !isEmpty else { return }
        start += 1
    }

    /// Drops what was taken when that is all of the queue, or more than half of a long one.
    mutating func compact() {
        if start == elements.count {
            elements.removeAll(keepingCapacity: true)
            start = 0
        } else if start > 1_024 && start * 2 > elements.count {
            elements.removeFirst(start)
            start = 0
        }
    }

    /// Forgets every element (a reload starts the order again).
    mutating func removeAll() {
        elements.removeAll()
        start = 0
    }
}
