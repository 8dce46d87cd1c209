import Synchronization
import Testing

@testable import FoldtableServer

/// What a transport attaches to a message is released with it, once.
@Suite(.serialized) struct OutboundMessageTests {
    /// Frames released so far, by address (a C function pointer captures nothing).
    static let released = Mutex<[UInt]>([])

    private static let release: @convention(c) (UnsafeMutableRawPointer?) -> Void = { frame in
        released.withLock { $0.append(UInt(bitPattern: frame)) }
    }

    @Test func aMessageReleasesTheFrameAttachedToItOnceWhenItGoes() {
        let frame = UnsafeMutableRawPointer.allocate(byteCount: 8, alignment: 8)
        defer { frame.deallocate() }
        Self.released.withLock { $0.removeAll() }
        do {
            let message = OutboundMessage(Array("{}".utf8))
            #expect(message.transportFrame == nil)
            message.attachFrame(frame, release: Self.release)
            #expect(message.transportFrame == frame)
            #expect(Self.released.withLock { $0.isEmpty })
        }
        #expect(Self.released.withLock { $0 } == [UInt(bitPattern: frame)])
    }

    @Test func aMessageNobodySentReleasesNothing() {
        Self.released.withLock { $0.removeAll() }
        do {
            let message = OutboundMessage(Array("{}".utf8))
            #expect(message.bytes == Array("{}".utf8))
        }
        #expect(Self.released.withLock { $0.isEmpty })
    }
}
