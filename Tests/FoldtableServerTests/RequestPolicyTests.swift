import Testing

@testable import FoldtableServer

/// Host, Origin and X-Forwarded-For read as ASCII bytes: every hostile form is refused (or, for
/// X-Forwarded-For, ignored), never trapped on.
@Suite struct RequestPolicyGrammar {
    let policy = RequestPolicy(hostNames: ["tables.example.com"], origins: ["https://tables.example.com"], trustedProxies: ["127.0.0.1"])

    @Test func ordinaryHostsAreAllowed() {
        for host in [
            "127.0.0.1", "127.0.0.1:8080", "localhost", "LOCALHOST:80", "tables.example.com", "Tables.Example.COM:443", "[::1]", "[::1]:8080",
            "::1", "[2001:db8::7]", "[::ffff:192.0.2.1]:65535", "10.0.0.255", "001.002.003.004",
        ] {
            #expect(policy.allowsHost(host), "\(host)")
        }
    }

    @Test func aDigitWithACombiningMarkIsRefusedNotTrappedOn() {
        #expect(!policy.allowsHost("1\u{301}.1.1.1"))
        #expect(!policy.allowsHost("1.1.1.1\u{301}"))
        #expect(!policy.allowsHost("tables.example.com\u{301}"))
    }

    @Test func aZeroWidthJoinerIsRefused() {
        #expect(!policy.allowsHost("0\u{200D}.0.0.1"))
        #expect(!policy.allowsHost("local\u{200D}host"))
    }

    @Test func fullWidthAndOtherNonASCIIDigitsAreRefused() {
        #expect(!policy.allowsHost("\u{FF11}.1.1.1"))
        #expect(!policy.allowsHost("\u{0661}.1.1.1"))  // Arabic-Indic one
        #expect(!policy.allowsHost("127.0.0.1:\u{FF18}080"))
    }

    @Test func hugeNumbersAreRefused() {
        let digits = String(repeating: "9", count: 10_000)
        #expect(!policy.allowsHost("\(digits).1.1.1"))
        #expect(!policy.allowsHost("1.1.1.1:\(digits)"))
        #expect(!policy.allowsHost("256.1.1.1"))
        #expect(!policy.allowsHost("1.1.1.1000"))
        #expect(!HostSyntax.isIPLiteral("99999999999999999999.1.1.1"))
    }

    @Test func emptyLabelsAndPartsAreRefused() {
        for host in ["", ".", "1..1.1", ".1.1.1", "tables..example.com", ".tables.example.com", "tables.example.com.", ":80", "[]", "[]:80"] {
            #expect(!policy.allowsHost(host), "\(host)")
        }
    }

    @Test func portsPast65535OrNotDigitsAreRefused() {
        for host in ["127.0.0.1:65536", "127.0.0.1:99999", "127.0.0.1:", "127.0.0.1:-1", "127.0.0.1:+80", "127.0.0.1:8 0", "[::1]:70000"] {
            #expect(!policy.allowsHost(host), "\(host)")
        }
    }

    @Test func malformedIPv6LiteralsAreRefused() {
        for host in [
            "[::1", "::1]", "[::1]x", "[::1]:", "[1:2:3:4:5:6:7:8:9]", "[1::2::3]", "[:::1]", "[12345::]", "[::g]", "[1:2:3:4:5:6:7]",
            "[::1.2.3.256]",
        ] {
            #expect(!policy.allowsHost(host), "\(host)")
        }
    }

    @Test func controlCharactersAndSpacesAreRefused() {
        for host in ["127.0.0.1\n", "local host", "127.0.0.1\0", "tables.example.com\r\nX: y", "\u{7F}"] {
            #expect(!policy.allowsHost(host), "\(host)")
        }
    }

    @Test func aHostLongerThan255BytesIsRefused() {
        #expect(!policy.allowsHost(String(repeating: "a.", count: 128) + "com"))
    }

    @Test func originsAreComparedAsASCIIBytes() {
        #expect(policy.allowsOrigin("https://tables.example.com", host: "tables.example.com"))
        #expect(policy.allowsOrigin("http://127.0.0.1:8080", host: "127.0.0.1:8080"))
        #expect(!policy.allowsOrigin("http://1\u{301}27.0.0.1:8080", host: "127.0.0.1:8080"))
        #expect(!policy.allowsOrigin("https://tables.example.com\u{301}", host: "tables.example.com"))
        #expect(!policy.allowsOrigin("http://127.0.0.1:8080", host: "1\u{301}27.0.0.1:8080"))
        #expect(!policy.allowsOrigin("null", host: "127.0.0.1"))
        #expect(!policy.allowsOrigin("https://evil.example", host: "127.0.0.1"))
    }

    @Test func aForwardedForOfNonASCIIIsIgnoredForThePeer() {
        #expect(policy.clientAddress(peer: "127.0.0.1", forwardedFor: "1\u{301}.1.1.1") == "127.0.0.1")
        #expect(policy.clientAddress(peer: "127.0.0.1", forwardedFor: "0\u{200D}.0.0.1") == "127.0.0.1")
        #expect(policy.clientAddress(peer: "127.0.0.1", forwardedFor: "\u{FF11}.1.1.1") == "127.0.0.1")
        #expect(policy.clientAddress(peer: "127.0.0.1", forwardedFor: String(repeating: "9", count: 10_000)) == "127.0.0.1")
        #expect(policy.clientAddress(peer: "127.0.0.1", forwardedFor: "1.2.3.4, 999.1.1.1") == "127.0.0.1")
    }

    @Test func aForwardedForIsBelievedOnlyFromATrustedProxy() {
        #expect(policy.clientAddress(peer: "127.0.0.1", forwardedFor: "203.0.113.9, 198.51.100.7 ") == "198.51.100.7")
        #expect(policy.clientAddress(peer: "127.0.0.1", forwardedFor: "2001:db8::1") == "2001:db8::1")
        #expect(policy.clientAddress(peer: "192.0.2.1", forwardedFor: "198.51.100.7") == "192.0.2.1")
    }

    @Test func publicURLsGiveTheirHostAndOrigin() {
        #expect(RequestPolicy.authority(ofURL: "https://Tables.Example.com:8443/path?q") == "tables.example.com:8443")
        #expect(RequestPolicy.origin(ofURL: "HTTPS://Tables.Example.com/x") == "https://tables.example.com")
        #expect(RequestPolicy.authority(ofURL: "https://t\u{301}ables.example.com") == nil)
        #expect(RequestPolicy.authority(ofURL: "tables.example.com") == nil)
        #expect(RequestPolicy.hostPart(of: "[::1]:8080") == "::1")
    }

    @Test func anEmbedOriginMayConnectAndAnOriginNotListedStillMayNot() {
        var config = ServerConfig()
        config.embedOrigins = ["HTTPS://Blog.Example.com"]
        let policy = RequestPolicy(config)
        #expect(policy.allowsOrigin("https://blog.example.com", host: "127.0.0.1:8080"))
        #expect(!policy.allowsOrigin("https://other.example.com", host: "127.0.0.1:8080"))
        #expect(!RequestPolicy(ServerConfig()).allowsOrigin("https://blog.example.com", host: "127.0.0.1:8080"))
    }

    @Test func anEmbedOriginMayNotCallTheHTTPAPIWhileAllowedOriginsAndPublicURLsStillMay() {
        var config = ServerConfig()
        config.embedOrigins = ["https://blog.example.com"]
        config.allowedOrigins = ["https://admin.example.com"]
        config.publicURLs = ["https://tables.example.com"]
        let api = RequestPolicy.api(config)
        #expect(!api.allowsOrigin("https://blog.example.com", host: "tables.example.com"))
        #expect(api.allowsOrigin("https://admin.example.com", host: "tables.example.com"))
        #expect(api.allowsOrigin("https://tables.example.com", host: "tables.example.com"))
        #expect(RequestPolicy(config).allowsOrigin("https://blog.example.com", host: "tables.example.com"))
    }
}
