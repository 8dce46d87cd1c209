import FoldtableServer
import Testing

@testable import FoldtableTransport

/// The transport's clock is the monotonic clock ``MonotonicTime`` reads: sessions convert a
/// reading of one into the other instead of taking a second reading.
@Suite struct TransportClock {
    @Test func aMonotonicReadingConvertsToTheTransportsMilliseconds() throws {
        var config = ServerConfig()
        config.port = 0
        config.webRoot = ""
        // Not run: both clocks are plain readings that need no service loop.
        let transport = try LWSTransport(config: config)
        for _ in 0..<1_000 {
            let before = transport.nowMilliseconds()
            let converted = try #require(transport.milliseconds(at: .now))
            let after = transport.nowMilliseconds()
            #expect(before <= converted && converted <= after)
        }
    }
}
