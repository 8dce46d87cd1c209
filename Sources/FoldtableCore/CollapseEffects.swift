/// An event's collapse effects: the sections whose collapsed state it altered, in table order.
///
/// A toggle alters one section and most other changes none, so the first effect is held
/// inline and only the rest in an array. An array of its own for every event was an allocation
/// per change on the service thread, freed in bulk after the commit on whichever thread let go
/// last, and a reference to retain and release each time the event was copied. Reads like an
/// array of ``CollapseEffect`` (a random-access collection, built from an array literal).
public struct CollapseEffects: RandomAccessCollection, Equatable, Sendable, ExpressibleByArrayLiteral, CustomStringConvertible {
    /// The effects after the first: empty (no allocation) for all but accordion and expand-all
    /// changes.
    private var rest: [CollapseEffect] = []
    /// The first effect; `nil` only when there is none (then `rest` is empty too). Last, so that
    /// the 7 bytes after its flag are tail padding, which a struct holding this one may fill
    /// (``TableEvent`` keeps its commit time there).
    private var head: CollapseEffect?

    public init() {}

    /// One effect, held inline.
    public init(_ effect: CollapseEffect) {
        head = effect
    }

    public init<Effects: Sequence>(_ effects: Effects) where Effects.Element == CollapseEffect {
        for effect in effects { append(effect) }
    }

    public init(arrayLiteral effects: CollapseEffect...) {
        self.init(effects)
    }

    public mutating func append(_ effect: CollapseEffect) {
        if head == nil { head = effect } else { rest.append(effect) }
    }

    public var startIndex: Int { 0 }
    public var endIndex: Int { head == nil ? 0 : 1 + rest.count }

    public subscript(position: Int) -> CollapseEffect {
        precondition(position >= 0 && position < endIndex, "collapse effect index out of range")
        return position == 0 ? head! : rest[position - 1]  // safe: position 0 < endIndex only when head is set
    }

    public var description: String { Array(self).description }
}
