import FoldtableCore

/// A mistake on the command line: one sentence, printed as one line on stderr (exit status 2).
public struct UsageError: Error, Equatable, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
}

/// Where and as whom to join a session, and how patient to be.
public struct ConnectOptions: Equatable, Sendable {
    public var url: ServerURL
    public var session: String
    /// The display name others see.
    public var name: String
    /// A PEM file of CAs to trust for `wss://` (`--ca`); `nil` = the system store.
    public var caPath: String?
    /// Accept self-signed or expired certificates and any host name (`--insecure`, tests only).
    public var insecure: Bool
    /// How long a script command waits for the server (connect, join, answer), in milliseconds.
    public var timeoutMs: Int
    /// A signed token for servers that need one (`--token`, or `FOLDTABLE_TOKEN`).
    public var token: String?

    public init(
        url: ServerURL, session: String, name: String, caPath: String? = nil, insecure: Bool = false, timeoutMs: Int = 10_000, token: String? = nil
    ) {
        self.url = url
        self.session = session
        self.name = name
        self.caPath = caPath
        self.insecure = insecure
        self.timeoutMs = timeoutMs
        self.token = token
    }
}

/// What a section command does to its section.
public enum SectionAction: String, Equatable, Sendable {
    case toggle, expand, collapse
}

/// One parsed `foldtable` invocation.
public enum Command: Equatable, Sendable {
    /// Full-screen interactive client.
    case join(ConnectOptions)
    /// Print every message as one JSON line until interrupted.
    case watch(ConnectOptions)
    /// Print section -> collapsed as one JSON object.
    case get(ConnectOptions, byTitle: Bool)
    /// Toggle, expand or collapse one section (by key or by title).
    case section(ConnectOptions, SectionAction, SectionRef)
    /// Expand all (`false`) or collapse all (`true`).
    case setAll(ConnectOptions, collapsed: Bool)
    case help
}

/// The command line parser.
public enum Arguments {
    public static let usage = """
        usage: foldtable COMMAND URL SESSION [options]

        commands:
          join URL SESSION [--name NAME]      the table, full-screen (keys: arrows or j/k move, Enter/Space
                                              toggle, e/c expand/collapse all, / search, n next match,
                                              v edit value, q quit)
          watch URL SESSION                   print every message from the server as one JSON line
          get URL SESSION [--by-title]        print {section: collapsed} as JSON (keys, or titles)
          toggle URL SESSION SECTION          toggle a section by key (or --title TITLE)
          expand URL SESSION SECTION          expand a section by key (or --title TITLE)
          collapse URL SESSION SECTION        collapse a section by key (or --title TITLE)
          expand-all URL SESSION
          collapse-all URL SESSION

        options:
          --name NAME        display name (default: $USER)
          --ca FILE          PEM file of CAs to trust for wss://
          --insecure         accept a self-signed or expired certificate and any host name (tests only)
          --timeout SECONDS  how long script commands wait for the server (default 10)
          --token TOKEN      a signed token, for servers that need one (default: $FOLDTABLE_TOKEN)

        URL is ws://HOST:PORT/ws or wss://HOST:PORT/ws. Exit status: 0 done, 1 refused or unknown
        section, 2 bad usage or URL, 3 server unreachable or connection lost.
        """

    /// Parses the arguments after the program name. `environment` supplies the default name.
    public static func parse(_ arguments: [String], environment: [String: String] = [:]) throws(UsageError) -> Command {
        var positional: [String] = []
        var name: String?
        var caPath: String?
        var insecure = false
        var timeoutMs = 10_000
        var byTitle = false
        var title: String?
        var token = environment["FOLDTABLE_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        var index = 0
        var optionsEnded = false
        func value(_ flag: String, inline: String?) throws(UsageError) -> String {
            if let inline { return inline }
            index += 1
            guard index < arguments.count else { throw UsageError("\(flag) needs a value") }
            return arguments[index]
        }
        while index < arguments.count {
            let argument = arguments[index]
            if optionsEnded || !argument.hasPrefix("-") || argument == "-" {
                positional.append(argument)
                index += 1
                continue
            }
            var flag = argument
            var inline: String?
            if let equals = argument.firstIndex(of: "="), argument.hasPrefix("--") {
                flag = String(argument[..<equals])
                inline = String(argument[argument.index(after: equals)...])
            }
            switch flag {
            case "--":
                optionsEnded = true
            case "-h", "--help":
                return .help
            case "--name":
                name = try value(flag, inline: inline)
            case "--ca":
                caPath = try value(flag, inline: inline)
                if caPath?.isEmpty == true { throw UsageError("--ca needs a file name") }
            case "--insecure":
                insecure = true
            case "--timeout":
                let text = try value(flag, inline: inline)
                guard let seconds = Double(text), seconds > 0, seconds <= 3_600 else {
                    throw UsageError("--timeout must be a number of seconds from 0 to 3600, not \"\(DisplayText.sanitize(text))\"")
                }
                timeoutMs = max(1, Int(seconds * 1_000))
            case "--by-title":
                byTitle = true
            case "--title":
                title = try value(flag, inline: inline)
            case "--token":
                let text = try value(flag, inline: inline)
                guard !text.isEmpty, text.utf8.count <= 4_096, text.allSatisfy({ $0.isASCII && !$0.isWhitespace }) else {
                    throw UsageError("--token must be a token (up to 4096 printable characters)")
                }
                token = text
            default:
                throw UsageError("unknown option \(DisplayText.sanitize(flag)) (try foldtable --help)")
            }
            index += 1
        }

        guard !positional.isEmpty else { throw UsageError("no command given (try foldtable --help)") }
        let verb = positional.removeFirst()
        if verb == "help" { return .help }
        let verbs = ["join", "watch", "get", "toggle", "expand", "collapse", "expand-all", "collapse-all"]
        guard verbs.contains(verb) else { throw UsageError("unknown command \"\(DisplayText.sanitize(verb))\" (try foldtable --help)") }
        let takesSection = ["toggle", "expand", "collapse"].contains(verb)
        if byTitle && verb != "get" { throw UsageError("--by-title only goes with get") }
        if title != nil && !takesSection { throw UsageError("--title only goes with toggle, expand and collapse") }

        let expected = takesSection && title == nil ? 3 : 2
        guard positional.count >= 2 else { throw UsageError("\(verb) needs a URL and a session name") }
        guard positional.count == expected else {
            if takesSection && positional.count == 2 { throw UsageError("\(verb) needs a section key (or --title TITLE)") }
            if takesSection && title != nil { throw UsageError("give a section key or --title, not both") }
            throw UsageError("unexpected argument \"\(DisplayText.sanitize(positional[expected]))\"")
        }
        let url = try ServerURL.parse(positional[0])
        let session = positional[1]
        guard JoinRequest.isValidSessionName(session) else {
            throw UsageError("bad session name \"\(DisplayText.sanitize(session))\": 1 to 64 letters, digits, _ or -")
        }
        let displayName = name ?? defaultName(environment)
        guard !displayName.isEmpty, displayName.utf8.count <= 64, !displayName.contains(where: \.isNewline) else {
            throw UsageError("--name must be 1 to 64 bytes on one line")
        }
        if let caPath, !url.tls { throw UsageError("--ca only applies to wss:// URLs (\(caPath))") }
        let options = ConnectOptions(
            url: url, session: session, name: displayName, caPath: caPath, insecure: insecure, timeoutMs: timeoutMs, token: token)

        switch verb {
        case "join": return .join(options)
        case "watch": return .watch(options)
        case "get": return .get(options, byTitle: byTitle)
        case "expand-all": return .setAll(options, collapsed: false)
        case "collapse-all": return .setAll(options, collapsed: true)
        default:
            let action = SectionAction(rawValue: verb) ?? .toggle
            if let title {
                guard !title.isEmpty else { throw UsageError("--title needs a title") }
                return .section(options, action, .title(title))
            }
            let key = positional[2]
            guard !key.isEmpty else { throw UsageError("the section key is empty") }
            return .section(options, action, .key(key))
        }
    }

    /// `$USER` (or `$LOGNAME`) when it makes a valid name, else "terminal".
    static func defaultName(_ environment: [String: String]) -> String {
        for variable in ["USER", "LOGNAME"] {
            if let name = environment[variable], !name.isEmpty, name.utf8.count <= 64, !name.contains(where: \.isNewline) {
                return name
            }
        }
        return "terminal"
    }
}
