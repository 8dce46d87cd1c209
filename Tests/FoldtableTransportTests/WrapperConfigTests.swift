import CFoldtableWS
import FoldtableCore
import FoldtableServer
import Testing

@testable import FoldtableTransport

/// The one place that turns settings into the C wrapper's config and starts it: foldtabled's
/// settings arrive unchanged, and what the C side refuses comes back as its own line.
@Suite struct WrapperConfigTests {
    @Test func foldtabledsSettingsBecomeTheWrappersSettings() {
        var config = ServerConfig()
        config.webRoot = ""
        config.maxMessageBytes = 12_345
        config.pingIntervalSecs = 7
        config.hangupSecs = 9
        config.permessageDeflate = true
        let wrapper = WrapperConfig(config)
        #expect(wrapper.host == config.host)
        #expect(wrapper.port == config.port)
        #expect(wrapper.webRoot == nil, "an empty web root serves no files")
        #expect(wrapper.wsPath == "/ws")
        #expect(wrapper.spaPrefix == "/s/")
        #expect(wrapper.maxMessageBytes == 12_345)
        #expect(wrapper.pingIntervalSecs == 7)
        #expect(wrapper.hangupSecs == 9)
        #expect(wrapper.permessageDeflate)
        #expect(wrapper.slowCloseCode == CloseCode.slowConsumer)
    }

    @Test func embedOriginsReachTheWrapperInTheFormBrowsersSendAsOrigin() {
        var config = ServerConfig()
        #expect(WrapperConfig(config).corsOrigins.isEmpty, "no embed origins: no CORS header for anyone")
        config.embedOrigins = ["https://Blog.Example.com", "http://127.0.0.2:8000"]
        #expect(WrapperConfig(config).corsOrigins == ["https://blog.example.com", "http://127.0.0.2:8000"])
    }

    @Test func aServerStartsOnAFreePort() throws {
        var config = ServerConfig()
        config.port = 0
        config.webRoot = ""
        let wrapper = WrapperConfig(config)
        let server = try wrapper.createServer(callbacks: ftws_callbacks())
        defer { ftws_server_destroy(server) }
        #expect(ftws_server_port(server) > 0)
    }

    @Test func aSettingTheCSideRefusesThrowsItsOwnLine() {
        var wrapper = WrapperConfig(ServerConfig())
        wrapper.webRoot = nil
        wrapper.wsPath = "ws"
        #expect {
            _ = try wrapper.createServer(callbacks: ftws_callbacks())
        } throws: { error in
            (error as? LWSTransport.StartError)?.description == "ws_path must start with '/' (got \"ws\")"
        }
    }

    @Test func aPortTooLargeForACIntIsRefusedNotTrappedOn() {
        var wrapper = WrapperConfig(ServerConfig())
        wrapper.webRoot = nil
        wrapper.port = Int.max
        #expect {
            _ = try wrapper.createServer(callbacks: ftws_callbacks())
        } throws: { error in
            (error as? LWSTransport.StartError)?.description == "port must be 0..65535"
        }
    }
}
