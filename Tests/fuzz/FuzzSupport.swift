// Compiled into every fuzz target beside its harness (Tests/fuzz/run.sh): what all of them share.

/// Traps with `message` (libFuzzer reports it as a crash and writes the input to a file).
func require(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String) {
    if !condition() { fatalError("fuzz invariant: \(message())") }
}
