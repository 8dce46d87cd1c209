import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The addresses of this host's own interfaces, which a webhook may not reach unless
/// `--webhook-allow` lists them: on a server with a public address, a POST to that address goes
/// over loopback to whatever listens on the host, past any firewall in front of it, so "public"
/// is not enough.
///
/// Read with `getifaddrs` when made, and again on the first question after ``maxAgeSeconds``
/// (the PUT's check and the HTTP client's check before each connect ask), so an address the host
/// gains later (DHCP, a new interface) is refused within a minute. Thread-safe: the service thread
/// and the HTTP client's thread both ask.
public final class HostAddresses: Sendable {
    /// How old a reading may be before the next question reads the interfaces again.
    public static let maxAgeSeconds = 60

    private struct Reading {
        var addresses: Set<[UInt8]>
        var at: ContinuousClock.Instant
    }

    private let reading: Mutex<Reading>
    private let read: @Sendable () -> Set<[UInt8]>

    /// The interfaces' addresses (4 or 16 bytes each) from `read`: ``interfaceAddresses()`` in
    /// production, a fixed set in tests.
    public init(read: @escaping @Sendable () -> Set<[UInt8]> = HostAddresses.interfaceAddresses) {
        self.read = read
        reading = Mutex(Reading(addresses: read(), at: .now))
    }

    /// Whether `address` is one of this host's own, reading the interfaces again first when the
    /// last reading is older than ``maxAgeSeconds``.
    public func contains(_ address: [UInt8]) -> Bool {
        reading.withLock { reading in
            if reading.at.duration(to: .now) >= .seconds(Self.maxAgeSeconds) {
                reading = Reading(addresses: read(), at: .now)
            }
            return reading.addresses.contains(address)
        }
    }

    /// Reads the interfaces now.
    public func refresh() {
        let fresh = read()
        reading.withLock { $0 = Reading(addresses: fresh, at: .now) }
    }

    /// Every IPv4 and IPv6 address of every interface (up or not: one brought up later is still
    /// the host's own), from `getifaddrs`; empty when it fails.
    public static func interfaceAddresses() -> Set<[UInt8]> {
        var first: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&first) == 0 else { return [] }
        defer { freeifaddrs(first) }
        var found: Set<[UInt8]> = []
        var cursor = first
        while let entry = cursor {
            cursor = entry.pointee.ifa_next
            guard let socketAddress = entry.pointee.ifa_addr else { continue }
            let raw = UnsafeRawPointer(socketAddress)
            switch Int32(socketAddress.pointee.sa_family) {
            case AF_INET:
                var ip = raw.loadUnaligned(as: sockaddr_in.self).sin_addr
                found.insert(withUnsafeBytes(of: &ip) { Array($0) })
            case AF_INET6:
                var ip = raw.loadUnaligned(as: sockaddr_in6.self).sin6_addr
                found.insert(withUnsafeBytes(of: &ip) { Array($0) })
            default:
                continue
            }
        }
        return found
    }
}
