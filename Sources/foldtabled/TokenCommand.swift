import FoldtableAuth
import FoldtableServer
import Foundation

/// `foldtabled token --token-secret-file PATH --session demo --role editor --name ana --ttl 1h`
/// prints a signed token (for self-hosters, scripts and tests).
enum TokenCommand {
    static let usage = """
        usage: foldtabled token --session NAME[,NAME...]|'*' [--role viewer|editor|owner] [--name NAME] [--user ID] [--ttl 1h]
                                [--jti ID] [--label TEXT]
                                (--token-secret-file FILE, a --config FILE naming one, or FOLDTABLE_TOKEN_SECRET)
          --ttl    lifetime: N plus s, m, h or d (default 1h)
          --jti    the token's id, what DELETE /api/v1/sessions/N/invites/ID withdraws it by
                   (1-64 letters, digits, _ or -; default: a random one)
          --label  what the token is for (up to 128 bytes), shown beside its members
        """

    static func run(_ arguments: [String], environment: [String: String]) -> Never {
        var sessions: [String] = []
        var role = Role.editor
        var name: String?
        var user: String?
        var ttl: UInt64 = 3_600
        var id: String?
        var label: String?
        var rest: [String] = []
        var index = 0
        func value() -> String {
            index += 1
            guard index < arguments.count else { fail("\(arguments[index - 1]) needs a value\n\(usage)") }
            return arguments[index]
        }
        while index < arguments.count {
            switch arguments[index] {
            case "--session", "--sessions": sessions = value().split(separator: ",").map(String.init)
            case "--role":
                let text = value()
                guard let parsed = Role(rawValue: text) else { fail("--role must be viewer, editor or owner, not \"\(text)\"") }
                role = parsed
            case "--name": name = value()
            case "--user": user = value()
            case "--ttl":
                let text = value()
                guard let seconds = duration(text) else { fail("--ttl must look like 90s, 15m, 1h or 7d, not \"\(text)\"") }
                ttl = seconds
            case "--jti":
                let text = value()
                guard AccessGrant.isValidId(text) else {
                    fail("--jti must be 1 to \(AccessGrant.maxIdBytes) letters, digits, _ or -, not \"\(text)\"")
                }
                id = text
            case "--label":
                let text = value()
                guard text.utf8.count <= AccessGrant.maxLabelBytes else { fail("--label must be at most \(AccessGrant.maxLabelBytes) bytes") }
                label = text
            case "--help", "-h":
                print(usage)
                exit(0)
            default:
                rest.append(arguments[index])
                if arguments[index].hasPrefix("--") && !arguments[index].contains("=") && index + 1 < arguments.count {
                    rest.append(value())
                }
            }
            index += 1
        }
        guard !sessions.isEmpty else { fail("--session is required\n\(usage)") }
        let config: ServerConfig
        do {
            var env = environment
            env["FOLDTABLE_OPEN"] = "true"  // only the secret matters here, not where the server binds
            guard case .run(let parsed) = try ServerConfig.parse(arguments: rest, environment: env) else { fail(usage) }
            config = parsed
        } catch {
            ConfigCheck.refuse(error)
        }
        let secret: [UInt8]
        do {
            guard let found = try TokenSetup.secret(config) else { fail("no secret: give --token-secret-file FILE or set FOLDTABLE_TOKEN_SECRET") }
            secret = found
        } catch {
            fail(error.description)
        }
        // A token's `exp` is a JSON integer (at most 2^63-1), and the sum must not trap.
        let end = Hub.wallClock().addingReportingOverflow(ttl)
        guard !end.overflow, end.partialValue <= UInt64(Int64.max) else { fail("--ttl is too long") }
        let expires = end.partialValue
        // A random id by default, so every token can be withdrawn.
        let jti = id ?? Hub.randomTokenId()
        print(
            HMACTokens(secret: secret).sign(
                user: user ?? name ?? "user", name: name, sessions: sessions, role: role, expires: expires, id: jti, label: label))
        exit(0)
    }

    /// Seconds in `90s`, `15m`, `1h`, `7d` (or a bare number of seconds).
    static func duration(_ text: String) -> UInt64? {
        let units: [Character: UInt64] = ["s": 1, "m": 60, "h": 3_600, "d": 86_400]
        if let last = text.last, let unit = units[last], let number = UInt64(text.dropLast()), number > 0 {
            let seconds = number.multipliedReportingOverflow(by: unit)
            return seconds.overflow ? nil : seconds.partialValue
        }
        if let number = UInt64(text), number > 0 { return number }
        return nil
    }

    private static func fail(_ line: String) -> Never {
        FileHandle.standardError.write(Data("foldtabled: \(line)\n".utf8))
        exit(2)
    }
}
