import FoldtableCore

@testable import FoldtableServer

/// What tests read of a core's order: the head of a ``LocalOrder``, the applied position of a
/// ``StreamOrder`` (a test of one kind of order reads only its own).
extension SessionCore {
    var head: Table { (order as? LocalOrder)?.head ?? Table() }
    var appliedPosition: String { (order as? StreamOrder)?.appliedPosition ?? "" }
}
