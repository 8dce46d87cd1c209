import Dispatch
import FoldtableServer
import Foundation
import Synchronization
import Testing

@testable import FoldtableTransport

/// The transport's post: other threads hand work to the lws service thread.
@Suite struct PostingToTheServiceThread {
    /// Runs a real LWSTransport on its own thread; returns it with the thread's identity.
    final class Running: @unchecked Sendable {
        // @unchecked: `transport` is touched only on the service thread after `start`, apart from
        // its thread-safe members (serviceQueue, stopHandle); `serviceThread` is set before
        // `started` is signalled and read after.
        let transport: LWSTransport
        var serviceThread: pthread_t?
        let started = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)

        init() throws {
            var config = ServerConfig()
            config.port = 0
            config.webRoot = ""
            transport = try LWSTransport(config: config)
        }

        func start() {
            let thread = Thread { [self] in
                serviceThread = pthread_self()
                started.signal()
                _ = transport.run()
                finished.signal()
            }
            thread.start()
            started.wait()
        }

        func stop() {
            transport.stopHandle.stop(graceMilliseconds: 0)
            finished.wait()
        }
    }

    @Test func workPostedFromAnotherThreadRunsOnTheServiceThreadInOrder() throws {
        let running = try Running()
        running.start()
        defer { running.stop() }
        let ran = Mutex<[(Int, Bool)]>([])
        let done = DispatchSemaphore(value: 0)
        let service = running.serviceThread
        let queue = running.transport.serviceQueue
        DispatchQueue.global().async {
            for index in 0..<1_000 {
                queue.post {
                    let onService = service.map { pthread_equal($0, pthread_self()) != 0 } ?? false
                    ran.withLock { $0.append((index, onService)) }
                    if index == 999 { done.signal() }
                }
            }
        }
        #expect(done.wait(timeout: .now() + 10) == .success)
        let results = ran.withLock { $0 }
        #expect(results.map(\.0) == Array(0..<1_000))
        #expect(results.allSatisfy { $0.1 })
    }

    @Test func postsFromManyThreadsAtOnceAllRun() throws {
        let running = try Running()
        running.start()
        defer { running.stop() }
        let count = Atomic<Int>(0)
        let queue = running.transport.serviceQueue
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<500 { queue.post { count.add(1, ordering: .relaxed) } }
        }
        let deadline = Date().addingTimeInterval(10)
        while count.load(ordering: .relaxed) < 4_000 && Date() < deadline { usleep(1_000) }
        #expect(count.load(ordering: .relaxed) == 4_000)
    }
}
