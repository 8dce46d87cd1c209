import FoldtableCore
import Testing

@testable import FoldtableServer

/// The SSRF guard: which addresses a webhook may reach, by default and with `--webhook-allow`,
/// for IPv4, IPv6 and IPv4-mapped IPv6; and what a PUT refuses before any DNS.
@Suite struct WebhookAddressTests {
    func category(_ text: String) -> WebhookAddressPolicy.Category? {
        guard let bytes = WebhookAddressPolicy.parseAddress(text) else {
            Issue.record("\(text) did not parse")
            return .reserved
        }
        return WebhookAddressPolicy.category(of: bytes)
    }

    @Test func everyNonPublicIPv4RangeHasItsCategory() {
        #expect(category("0.0.0.0") == .unspecified)
        #expect(category("127.0.0.1") == .loopback)
        #expect(category("127.255.1.2") == .loopback)
        #expect(category("10.1.2.3") == .private)
        #expect(category("172.16.0.1") == .private)
        #expect(category("172.31.255.255") == .private)
        #expect(category("192.168.1.1") == .private)
        #expect(category("169.254.169.254") == .linkLocal)
        #expect(category("100.64.0.1") == .sharedCGNAT)
        #expect(category("100.127.255.255") == .sharedCGNAT)
        #expect(category("224.0.0.1") == .multicast)
        #expect(category("255.255.255.255") == .reserved)
        #expect(category("0.1.2.3") == .reserved)
    }

    @Test func publicIPv4AddressesNextToTheRangesArePublic() {
        for text in ["8.8.8.8", "172.15.255.255", "172.32.0.1", "100.63.255.255", "100.128.0.1", "192.169.0.1", "169.253.1.1", "223.255.255.255"] {
            #expect(category(text) == nil, "\(text)")
        }
    }

    @Test func everyNonPublicIPv6RangeHasItsCategoryAndPublicOnesAreNone() {
        #expect(category("::") == .unspecified)
        #expect(category("::1") == .loopback)
        #expect(category("[::1]") == .loopback)
        #expect(category("fc00::1") == .private)
        #expect(category("fd12:3456::1") == .private)
        #expect(category("fe80::1") == .linkLocal)
        #expect(category("febf::1") == .linkLocal)
        #expect(category("ff02::1") == .multicast)
        #expect(category("::7f00:1") == .reserved)
        #expect(category("2001:4860:4860::8888") == nil)
        #expect(category("fec0::1") == .private)
        #expect(category("feff::1") == .private)
    }

    @Test func everyRFC6890SpecialPurposeBlockIsRefusedAndItsNeighboursAreNot() {
        for text in [
            "192.0.0.8", "192.0.2.1", "198.18.0.1", "198.19.255.255", "198.51.100.7", "203.0.113.9", "192.88.99.1", "2001::1",
            "2001:0:4136:e378::1", "2001:db8::1", "100::1", "64:ff9b:1::1",
        ] {
            #expect(category(text) == .reserved, "\(text)")
        }
        for text in [
            "192.0.1.1", "192.0.3.1", "198.17.255.255", "198.20.0.1", "198.51.101.1", "203.0.114.1", "192.88.98.1", "2001:1::1", "100:0:0:1::1",
        ] {
            #expect(category(text) == nil, "\(text)")
        }
    }

    @Test func sixToFourAndNAT64AddressesAreJudgedByTheIPv4AddressTheyCarry() {
        // 2002:7f00:0001:: carries 127.0.0.1; 2002:0808:0808:: carries 8.8.8.8.
        #expect(category("2002:7f00:1::1") == .loopback)
        #expect(category("2002:a00:1::") == .private)
        #expect(category("2002:808:808::1") == nil)
        #expect(category("64:ff9b::127.0.0.1") == .loopback)
        #expect(category("64:ff9b::a9fe:a9fe") == .linkLocal)
        #expect(category("64:ff9b::8.8.8.8") == nil)
    }

    @Test func theHostsOwnAddressesAreRefusedAsLocalUnlessARangeListsThem() throws {
        let own = HostAddresses { [[8, 8, 4, 4], WebhookAddressPolicy.parseAddress("2001:4860::1") ?? []] }
        let policy = WebhookAddressPolicy(ownAddresses: own)
        #expect(policy.refusal(of: [8, 8, 4, 4]) == .local)
        #expect(policy.refusal(of: WebhookAddressPolicy.parseAddress("::ffff:8.8.4.4") ?? []) == .local)
        #expect(policy.refusal(of: WebhookAddressPolicy.parseAddress("2002:808:404::") ?? []) == .local)
        #expect(policy.refusal(of: WebhookAddressPolicy.parseAddress("2001:4860::1") ?? []) == .local)
        #expect(policy.refusal(of: [8, 8, 8, 8]) == nil)
        #expect(try WebhookURL("http://8.8.4.4/hook").literalRefusal(policy) == .local)
        let allowing = try WebhookAddressPolicy(allowing: ["8.8.4.4/32"], ownAddresses: own)
        #expect(allowing.refusal(of: [8, 8, 4, 4]) == nil)
    }

    @Test func theInterfacesAreReadFromTheSystemAndIncludeLoopback() {
        // Every Linux host has lo with 127.0.0.1: a reading that misses it read nothing.
        #expect(HostAddresses.interfaceAddresses().contains([127, 0, 0, 1]))
        #expect(HostAddresses().contains([127, 0, 0, 1]))
    }

    @Test func anIPv4MappedIPv6AddressIsJudgedAsTheIPv4AddressItCarries() {
        #expect(category("::ffff:127.0.0.1") == .loopback)
        #expect(category("::ffff:7f00:1") == .loopback)
        #expect(category("::ffff:10.0.0.1") == .private)
        #expect(category("::ffff:169.254.169.254") == .linkLocal)
        #expect(category("::ffff:8.8.8.8") == nil)
        // Allowed by the IPv4 range that holds it, too.
        let policy = try? WebhookAddressPolicy(allowing: ["127.0.0.1/32"])
        #expect(policy?.refusal(of: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 127, 0, 0, 1]) == nil)
        #expect(policy?.refusal(of: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 127, 0, 0, 2]) == .loopback)
    }

    @Test func anAllowListLetsThroughExactlyItsRanges() throws {
        let policy = try WebhookAddressPolicy(allowing: ["127.0.0.1/32", "10.0.0.0/8", "fd00::/8", "192.168.1.5", "hooks.internal"])
        #expect(policy.refusal(of: [127, 0, 0, 1]) == nil)
        #expect(policy.refusal(of: [127, 0, 0, 2]) == .loopback)
        #expect(policy.refusal(of: [10, 200, 3, 4]) == nil)
        #expect(policy.refusal(of: [192, 168, 1, 5]) == nil)
        #expect(policy.refusal(of: [192, 168, 1, 6]) == .private)
        #expect(policy.refusal(of: WebhookAddressPolicy.parseAddress("fd00::5") ?? []) == nil)
        #expect(policy.refusal(of: WebhookAddressPolicy.parseAddress("fc00::5") ?? []) == .private)
        #expect(policy.allowsHost("Hooks.Internal"))
        #expect(!policy.allowsHost("other.internal"))
        // Public addresses stay allowed with or without a list.
        #expect(policy.refusal(of: [8, 8, 8, 8]) == nil)
        #expect(WebhookAddressPolicy().refusal(of: [127, 0, 0, 1]) == .loopback)
    }

    @Test func anAllowItemThatIsNeitherACIDRNorAHostNameIsRefusedNamingIt() {
        for item in ["10.0.0.0/33", "::1/129", "10.0.0.0/x", "not a host", "1.2.3.4/"] {
            #expect(throws: ProtocolError.self, "\(item)") { try WebhookAddressPolicy(allowing: [item]) }
        }
    }

    @Test func addressLiteralsParseStrictly() {
        #expect(WebhookAddressPolicy.parseAddress("1.2.3.4") == [1, 2, 3, 4])
        #expect(WebhookAddressPolicy.parseAddress("01.2.3.4") == nil)
        #expect(WebhookAddressPolicy.parseAddress("1.2.3.256") == nil)
        #expect(WebhookAddressPolicy.parseAddress("1.2.3") == nil)
        #expect(WebhookAddressPolicy.parseAddress("1::2::3") == nil)
        #expect(WebhookAddressPolicy.parseAddress("1:2:3:4:5:6:7:8:9") == nil)
        #expect(WebhookAddressPolicy.parseAddress("::ffff:1.2.3.4") == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 1, 2, 3, 4])
        #expect(WebhookAddressPolicy.parseAddress("example.com") == nil)
    }

    @Test func aURLIsRefusedAtOnceWhenItsHostIsARefusedLiteralAndJudgedLaterWhenItIsAName() throws {
        let policy = WebhookAddressPolicy()
        #expect(try WebhookURL("http://127.0.0.1:8080/hook").literalRefusal(policy) == .loopback)
        #expect(try WebhookURL("https://[::1]/hook").literalRefusal(policy) == .loopback)
        #expect(try WebhookURL("https://[::ffff:169.254.169.254]/").literalRefusal(policy) == .linkLocal)
        #expect(try WebhookURL("http://localhost:9/").literalRefusal(policy) == .loopback)
        #expect(try WebhookURL("https://hooks.example.com/x?y=1").literalRefusal(policy) == nil)
        #expect(try WebhookURL("https://8.8.8.8/").literalRefusal(policy) == nil)
        let allowing = try WebhookAddressPolicy(allowing: ["127.0.0.1/32"])
        #expect(try WebhookURL("http://127.0.0.1:8080/hook").literalRefusal(allowing) == nil)
    }

    @Test func aNumericHostInAnyFormAResolverTakesIsJudgedAsTheAddressItIsAtThePUT() throws {
        let policy = WebhookAddressPolicy(ownAddresses: HostAddresses { [] })
        for url in ["http://127.1/", "http://2130706433/", "http://0x7f.1/", "http://0177.0.0.1/", "http://0x7f000001/", "http://127.0.1/"] {
            let parsed = try WebhookURL(url)
            #expect(parsed.host == "127.0.0.1", "\(url)")
            #expect(parsed.literalRefusal(policy) == .loopback, "\(url)")
        }
        #expect(try WebhookURL("http://169.254.43518/").literalRefusal(policy) == .linkLocal)
        #expect(try WebhookURL("http://134744072/").host == "8.8.8.8")
        #expect(try WebhookURL("http://134744072/").literalRefusal(policy) == nil)
        for bad in ["http://1.2.3.4.5/", "http://256.1.1.1/", "http://1.2.3.0x100/", "http://4294967296/", "http://08.1.1.1/", "http://example.123/"]
        {
            #expect(throws: ProtocolError.self, "\(bad)") { try WebhookURL(bad) }
        }
        // Names with digits elsewhere stay names.
        #expect(try WebhookURL("https://123.example.com/").host == "123.example.com")
        #expect(try WebhookURL("https://0xdead.beef.io/").host == "0xdead.beef.io")
    }

    @Test func onlyHTTPAndHTTPSURLsWithoutCredentialsOrFragmentsAreTaken() {
        for bad in [
            "ftp://example.com/", "file:///etc/passwd", "gopher://x", "http://user:pw@example.com/", "https://example.com/#x", "https://",
            "http://exa mple.com/", "example.com",
        ] {
            #expect(throws: ProtocolError.self, "\(bad)") { try WebhookURL(bad) }
        }
        #expect((try? WebhookURL("HTTPS://Example.COM:8443/p"))?.host == "example.com")
    }

    @Test func aSecretMustBeWhsecAndTheBase64OfTwentyFourToSixtyFourBytes() throws {
        #expect(try WebhookSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").key.count == 24)
        for bad in ["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_", "whsec_AAAA", "whsec_not base64!", "whsec_" + String(repeating: "A", count: 100)] {
            #expect(throws: ProtocolError.self, "\(bad)") { try WebhookSecret(bad) }
        }
        let generated = WebhookSecret.generate()
        #expect(generated.key.count == WebhookSecret.generatedBytes)
        #expect(try WebhookSecret(generated.text) == generated)
        #expect(WebhookSecret.generate() != generated)
    }
}
