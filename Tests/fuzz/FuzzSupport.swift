// Compiled into every fuzz target beside its harness (Tests/fuzz/run.sh): what all of them share.
// Every target links FoldtableCore.

import FoldtableCore

/// Traps with `message` (libFuzzer reports it as a crash and writes the input to a file).
func require(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String) {
    if !condition() { fatalError("fuzz invariant: \(message())") }
}

/// Small table limits, so that a short input (a CSV file, a snapshot or request from Redis) can
/// reach every "limit reached" branch.
let smallTableLimits: TableLimits = {
    var limits = TableLimits()
    limits.maxSections = 8
    limits.maxRowsPerSection = 16
    limits.maxRowsPerTable = 40
    limits.maxTextBytesPerTable = 2_000
    limits.maxTextBytes = 64
    limits.maxKeyBytes = 16
    return limits
}()
