import FoldtableCore

/// A mistake on the command line: one sentence, printed as one line on stderr (exit status 2).
public struct UsageError: Error, Equatable, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
}

/// Where and as whom to join a session, how patient to be, and how to print the outcome.
public struct ConnectOptions: Equatable, Sendable {
    public var url: ServerURL
    /// The session to join; `nil` for `list`, which only asks the server which sessions exist.
    public var session: String?
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
    /// Print one JSON document on stdout (`--json`) instead of text.
    public var json: Bool
    /// Make the session when no session has that name (`join`, and the commands that change a
    /// table: the user opens or writes to a name, which may be new). The commands that only
    /// read never do: `get` of a missing name is an error, not an empty session left behind.
    public var create = false

    public init(
        url: ServerURL, session: String?, name: String, caPath: String? = nil, insecure: Bool = false, timeoutMs: Int = 10_000,
        token: String? = nil, json: Bool = false
    ) {
        self.url = url
        self.session = session
        self.name = name
        self.caPath = caPath
        self.insecure = insecure
        self.timeoutMs = timeoutMs
        self.token = token
        self.json = json
    }
}

/// One parsed `foldtable` invocation.
public enum Command: Equatable, Sendable {
    /// Full-screen interactive client.
    case join(ConnectOptions)
    /// Print every message as one JSON line until interrupted.
    case watch(ConnectOptions)
    /// Print section -> collapsed as one JSON object.
    case get(ConnectOptions, byTitle: Bool)
    /// Print the sessions that exist (no session is joined).
    case list(ConnectOptions)
    /// Print the rows that contain `query`, found by the server in every section.
    case find(ConnectOptions, query: String, limit: Int)
    /// Print the session's latest changes, newest first: who, when, what.
    case history(ConnectOptions, limit: Int)
    /// Print the table's options as one JSON object.
    case options(ConnectOptions)
    /// Make one change (toggle, expand, ..., add-row, options with settings), with the change id
    /// given by `--id` (else one of the connection's own).
    case change(ConnectOptions, Change, id: String?)
    /// Take back this user's latest change in the session not yet undone (`redo`: make again
    /// the latest it undid), with the change id given by `--id` (else a fresh one).
    case undo(ConnectOptions, redo: Bool, id: String?)
    case help
}

/// The command line parser.
public enum Arguments {
    public static let usage = """
        usage: foldtable COMMAND URL [SESSION] [ARGUMENTS] [options]

        commands (SECTION is a section key, or leave it out and give --title TITLE; ROW is a row key):
          join URL SESSION                    the table, full-screen (keys: arrows or j/k move, Enter/Space
                                              toggle, e/c expand/collapse all, / search, n next match,
                                              v edit value, u undo, U redo, p my view/shared, H history, q quit)
              foldtable join ws://localhost:8080/ws demo --name ana
          watch URL SESSION                   print every message from the server as one JSON line
              foldtable watch ws://localhost:8080/ws demo
          list URL                            the sessions and their member counts
              foldtable list ws://localhost:8080/ws
          get URL SESSION [--by-title]        print {section: collapsed} as JSON (keys, or titles)
              foldtable get ws://localhost:8080/ws demo --by-title
          find URL SESSION TEXT [--limit N]   rows whose label, value or detail contain TEXT (any case),
                                              also in collapsed sections: ROW, SECTION, label, value
              foldtable find ws://localhost:8080/ws demo leshan
          history URL SESSION [--limit N]     the latest changes, newest first, one a line: time, who,
                                              what (e.g. 12:03:04 ana collapsed Mac); default 50, up to 200
              foldtable history ws://localhost:8080/ws demo --limit 20
          toggle URL SESSION SECTION          toggle a section
              foldtable toggle ws://localhost:8080/ws demo mac
          expand URL SESSION SECTION          expand a section
              foldtable expand ws://localhost:8080/ws demo --title Mac
          collapse URL SESSION SECTION        collapse a section
              foldtable collapse ws://localhost:8080/ws demo mac
          expand-all URL SESSION              expand every section
              foldtable expand-all ws://localhost:8080/ws demo
          collapse-all URL SESSION            collapse every section
              foldtable collapse-all ws://localhost:8080/ws demo
          reveal URL SESSION ROW              make a row visible: expand its section
              foldtable reveal ws://localhost:8080/ws demo sichuan-3
          add-section URL SESSION TITLE       add a section, print its key [--key KEY] [--detail TEXT]
                                              [--footer TEXT] [--index N] [--collapsed | --expanded]
              foldtable add-section ws://localhost:8080/ws demo Watch --detail "2 models" --index 1
          add-row URL SESSION SECTION LABEL   add a row, print its key [--value TEXT] [--detail TEXT]
                                              [--key KEY] [--index N]
              foldtable add-row ws://localhost:8080/ws demo mac "Mac Pro" --value M2
          update-row URL SESSION ROW          change a row [--label TEXT] [--value TEXT]
                                              [--detail TEXT | --clear-detail]
              foldtable update-row ws://localhost:8080/ws demo mac-3 --value "M4 Pro"
          remove-row URL SESSION ROW          remove a row
              foldtable remove-row ws://localhost:8080/ws demo mac-3
          move-row URL SESSION ROW SECTION    move a row, also to another section [--index N]
              foldtable move-row ws://localhost:8080/ws demo mac-3 ipad --index 0
          rename-section URL SESSION SECTION TITLE
                                              give a section a new title
              foldtable rename-section ws://localhost:8080/ws demo mac Macs
          undo URL SESSION                    take back your latest change in the session (made from this
                                              user account's terminal, or with your token), print its seq
              foldtable undo ws://localhost:8080/ws demo
          redo URL SESSION                    make again the latest change you undid
              foldtable redo ws://localhost:8080/ws demo
          options URL SESSION [settings]      print the table's options as JSON, or set some:
                                              [--accordion on|off] [--sections-initially-collapsed on|off]
                                              [--collapsed-indicator TEXT] [--expanded-indicator TEXT]
                                              [--busy-threshold-ms N] [--show-busy-indicator on|off]
                                              [--title-lines N (0: whole titles)]
              foldtable options ws://localhost:8080/ws demo --accordion on

        options:
          --json             print one JSON document on stdout (all but join): a change prints
                             {"seq":N,"id":ID,"repeated":false,"collapsed":{...}} (and "key" for
                             add-section and add-row), find {"q","rows","truncated"}, history
                             {"events":[{"seq","time","author","change","collapsed"}],"more"}, list
                             {"sessions":[{"name","members"}]}; a refusal {"error":{"code",...}}
          --id ID            the change's id (1 to 64 bytes): a change sent again with the same id is
                             applied once, the repeat is acknowledged with the first one's seq
                             ("repeated":true); the default is a fresh id
          --name NAME        display name (default: $USER)
          --ca FILE          PEM file of CAs to trust for wss://
          --insecure         accept a self-signed or expired certificate and any host name (tests only)
          --timeout SECONDS  how long script commands wait for the server (default 10)
          --token TOKEN      a signed token, for servers that need one (default: $FOLDTABLE_TOKEN)

        Without --json: toggle, expand, collapse, expand-all, collapse-all and reveal print
        {section: collapsed} for what they changed, add-section and add-row the new key, list one
        session per line, find one row per line (tab-separated); other changes print nothing.
        URL is ws://HOST:PORT/ws or wss://HOST:PORT/ws. Exit status: 0 done, 1 refused (a change, an
        unknown section or row, or the join itself, e.g. for a bad token), 2 bad usage or URL,
        3 server unreachable or connection lost.
        """

    /// The subcommands, in the order of ``usage``.
    public static let verbs = [
        "join", "watch", "list", "get", "find", "history", "toggle", "expand", "collapse", "expand-all", "collapse-all", "reveal",
        "add-section", "add-row", "update-row", "remove-row", "move-row", "rename-section", "undo", "redo", "options",
    ]

    /// The subcommands that make a change (and so take `--id`).
    static let changeVerbs: Set<String> = [
        "toggle", "expand", "collapse", "expand-all", "collapse-all", "reveal", "add-section", "add-row", "update-row",
        "remove-row", "move-row", "rename-section", "undo", "redo", "options",
    ]

    /// Subcommands that name a section (by key, or by `--title`).
    static let sectionVerbs: Set<String> = ["toggle", "expand", "collapse", "add-row", "move-row", "rename-section"]

    /// Flags that go with some subcommands only, and which.
    static let flagVerbs: [String: [String]] = [
        "--by-title": ["get"],
        "--title": ["toggle", "expand", "collapse", "add-row", "move-row", "rename-section"],
        "--limit": ["find", "history"],
        "--key": ["add-section", "add-row"],
        "--detail": ["add-section", "add-row", "update-row"],
        "--footer": ["add-section"],
        "--collapsed": ["add-section"],
        "--expanded": ["add-section"],
        "--index": ["add-section", "add-row", "move-row"],
        "--value": ["add-row", "update-row"],
        "--label": ["update-row"],
        "--clear-detail": ["update-row"],
        "--accordion": ["options"],
        "--sections-initially-collapsed": ["options"],
        "--collapsed-indicator": ["options"],
        "--expanded-indicator": ["options"],
        "--busy-threshold-ms": ["options"],
        "--show-busy-indicator": ["options"],
        "--title-lines": ["options"],
    ]

    /// The arguments after URL and SESSION, by subcommand (a section is left out with `--title`).
    static let positionalNames: [String: [String]] = [
        "find": ["TEXT"], "toggle": ["SECTION"], "expand": ["SECTION"], "collapse": ["SECTION"], "reveal": ["ROW"],
        "add-section": ["TITLE"], "add-row": ["SECTION", "LABEL"], "update-row": ["ROW"], "remove-row": ["ROW"],
        "move-row": ["ROW", "SECTION"], "rename-section": ["SECTION", "TITLE"],
    ]

    /// What a subcommand lacks when its arguments are missing ("toggle needs ...").
    static let needs: [String: String] = [
        "find": "the text to find", "toggle": "a section key (or --title TITLE)", "expand": "a section key (or --title TITLE)",
        "collapse": "a section key (or --title TITLE)", "reveal": "a row key", "add-section": "a title",
        "add-row": "a section key (or --title TITLE) and a label", "update-row": "a row key", "remove-row": "a row key",
        "move-row": "a row key and a section key (or --title TITLE)",
        "rename-section": "a section key (or --title TITLE) and the new title",
    ]

    /// Flags that take no value.
    static let switches: Set<String> = ["--insecure", "--by-title", "--json", "--collapsed", "--expanded", "--clear-detail"]

    /// Parses the arguments after the program name. `environment` supplies the default name.
    public static func parse(_ arguments: [String], environment: [String: String] = [:]) throws(UsageError) -> Command {
        var positional: [String] = []
        var given: [String: String] = [:]
        var token = environment["FOLDTABLE_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        var index = 0
        var optionsEnded = false
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
            case _ where switches.contains(flag):
                if inline != nil { throw UsageError("\(flag) takes no value") }
                given[flag] = ""
            case "--token":
                let text = try value(flag, inline: inline, arguments, &index)
                guard !text.isEmpty, text.utf8.count <= 4_096, text.allSatisfy({ $0.isASCII && !$0.isWhitespace }) else {
                    throw UsageError("--token must be a token (up to 4096 printable characters)")
                }
                token = text
            case "--name", "--ca", "--timeout", "--title", "--id", "--limit", "--key", "--detail", "--footer", "--index", "--value",
                "--label", "--accordion", "--sections-initially-collapsed", "--collapsed-indicator", "--expanded-indicator",
                "--busy-threshold-ms", "--show-busy-indicator", "--title-lines":
                given[flag] = try value(flag, inline: inline, arguments, &index)
            default:
                throw UsageError("unknown option \(DisplayText.sanitize(flag)) (try foldtable --help)")
            }
            index += 1
        }

        guard !positional.isEmpty else { throw UsageError("no command given (try foldtable --help)") }
        let verb = positional.removeFirst()
        if verb == "help" { return .help }
        guard verbs.contains(verb) else { throw UsageError("unknown command \"\(DisplayText.sanitize(verb))\" (try foldtable --help)") }
        for (flag, allowed) in flagVerbs.sorted(by: { $0.key < $1.key }) where given[flag] != nil && !allowed.contains(verb) {
            throw UsageError("\(flag) only goes with \(list(allowed))")
        }
        if given["--json"] != nil && verb == "join" { throw UsageError("--json does not go with join (it is interactive)") }
        if given["--id"] != nil && !changeVerbs.contains(verb) { throw UsageError("--id only goes with commands that change the table") }

        // URL, SESSION (not for list), then the subcommand's own arguments.
        let title = given["--title"]
        let takesSession = verb != "list"
        guard positional.count >= (takesSession ? 2 : 1) else {
            throw UsageError(takesSession ? "\(verb) needs a URL and a session name" : "list needs a URL")
        }
        var names = positionalNames[verb] ?? []
        if title != nil, let at = names.firstIndex(of: "SECTION") { names.remove(at: at) }
        let fixed = takesSession ? 2 : 1
        let expected = fixed + names.count
        guard positional.count == expected else {
            if positional.count < expected { throw UsageError("\(verb) needs \(needs[verb] ?? "more arguments")") }
            if title != nil && sectionVerbs.contains(verb) && positional.count == expected + 1 {
                throw UsageError("give a section key or --title, not both")
            }
            throw UsageError("unexpected argument \"\(DisplayText.sanitize(positional[expected]))\"")
        }
        var named: [String: String] = [:]
        for (offset, name) in names.enumerated() { named[name] = positional[fixed + offset] }

        let url = try ServerURL.parse(positional[0])
        var session: String?
        if takesSession {
            let name = positional[1]
            guard JoinRequest.isValidSessionName(name) else {
                throw UsageError("bad session name \"\(DisplayText.sanitize(name))\": 1 to 64 letters, digits, _ or -")
            }
            session = name
        }
        let displayName = given["--name"] ?? defaultName(environment)
        guard !displayName.isEmpty, displayName.utf8.count <= 64, !displayName.contains(where: \.isNewline) else {
            throw UsageError("--name must be 1 to 64 bytes on one line")
        }
        var timeoutMs = 10_000
        if let text = given["--timeout"] {
            guard let seconds = Double(text), seconds > 0, seconds <= 3_600 else {
                throw UsageError("--timeout must be a number of seconds from 0 to 3600, not \"\(DisplayText.sanitize(text))\"")
            }
            timeoutMs = max(1, Int(seconds * 1_000))
        }
        let caPath = given["--ca"]
        if caPath?.isEmpty == true { throw UsageError("--ca needs a file name") }
        if let caPath, !url.tls { throw UsageError("--ca only applies to wss:// URLs (\(DisplayText.sanitize(caPath)))") }
        let id = given["--id"]
        if let id, id.isEmpty || id.utf8.count > 64 || id.contains(where: \.isNewline) {
            throw UsageError("--id must be 1 to 64 bytes on one line")
        }
        let options = ConnectOptions(
            url: url, session: session, name: displayName, caPath: caPath, insecure: given["--insecure"] != nil, timeoutMs: timeoutMs,
            token: token, json: given["--json"] != nil)

        /// The section the subcommand names: `--title`, or the SECTION argument.
        func section() throws(UsageError) -> SectionRef {
            if let title {
                guard !title.isEmpty else { throw UsageError("--title needs a title") }
                return .title(title)
            }
            let key = named["SECTION"] ?? ""
            guard !key.isEmpty else { throw UsageError("the section key is empty") }
            return .key(key)
        }
        func row() throws(UsageError) -> String {
            let key = named["ROW"] ?? ""
            guard !key.isEmpty else { throw UsageError("the row key is empty") }
            return key
        }
        func change(_ change: Change) -> Command { .change(options, change, id: id) }

        switch verb {
        case "join": return .join(options)
        case "watch": return .watch(options)
        case "get": return .get(options, byTitle: given["--by-title"] != nil)
        case "list": return .list(options)
        case "find":
            let query = named["TEXT"] ?? ""
            guard !query.isEmpty, query.utf8.count <= RowSearch.maxQueryBytes else {
                throw UsageError("the text to find must be 1 to \(RowSearch.maxQueryBytes) bytes")
            }
            var limit = RowSearch.defaultLimit
            if let text = given["--limit"] {
                guard let number = Int(text), (1...RowSearch.maxLimit).contains(number) else {
                    throw UsageError("--limit must be a number from 1 to \(RowSearch.maxLimit), not \"\(DisplayText.sanitize(text))\"")
                }
                limit = number
            }
            return .find(options, query: query, limit: limit)
        case "history":
            var limit = EventHistory.defaultLimit
            if let text = given["--limit"] {
                guard let number = Int(text), (1...EventHistory.maxLimit).contains(number) else {
                    throw UsageError("--limit must be a number from 1 to \(EventHistory.maxLimit), not \"\(DisplayText.sanitize(text))\"")
                }
                limit = number
            }
            return .history(options, limit: limit)
        case "toggle": return change(.toggle(section: try section()))
        case "expand": return change(.setCollapsed(section: try section(), collapsed: false))
        case "collapse": return change(.setCollapsed(section: try section(), collapsed: true))
        case "expand-all": return change(.setAll(collapsed: false))
        case "collapse-all": return change(.setAll(collapsed: true))
        case "reveal": return change(.reveal(row: try row()))
        case "add-section":
            if given["--collapsed"] != nil && given["--expanded"] != nil { throw UsageError("give --collapsed or --expanded, not both") }
            let collapsed: Bool? = given["--collapsed"] != nil ? true : given["--expanded"] != nil ? false : nil
            return change(
                .addSection(
                    NewSection(
                        key: try key(given["--key"]), title: named["TITLE"] ?? "", detail: given["--detail"], footer: given["--footer"],
                        collapsed: collapsed, index: try number("--index", given["--index"]))))
        case "add-row":
            return change(
                .addRow(
                    section: try section(),
                    row: NewRow(
                        key: try key(given["--key"]), label: named["LABEL"] ?? "", value: given["--value"] ?? "", detail: given["--detail"],
                        index: try number("--index", given["--index"]))))
        case "update-row":
            if given["--detail"] != nil && given["--clear-detail"] != nil { throw UsageError("give --detail or --clear-detail, not both") }
            let detail: String?? = given["--clear-detail"] != nil ? .some(nil) : given["--detail"].map { .some($0) }
            let patch = RowPatch(label: given["--label"], value: given["--value"], detail: detail)
            guard patch.label != nil || patch.value != nil || patch.detail != nil else {
                throw UsageError("update-row needs --label, --value, --detail or --clear-detail")
            }
            return change(.updateRow(row: try row(), patch: patch))
        case "remove-row": return change(.removeRow(row: try row()))
        case "move-row":
            let moved = try row()
            return change(.moveRow(row: moved, section: try section(), index: try number("--index", given["--index"])))
        case "rename-section":
            return change(.updateSection(section: try section(), patch: SectionPatch(title: named["TITLE"] ?? "")))
        case "undo", "redo": return .undo(options, redo: verb == "redo", id: id)
        default:  // options
            let patch = OptionsPatch(
                sectionsInitiallyCollapsed: try flag("--sections-initially-collapsed", given["--sections-initially-collapsed"]),
                collapsedIndicator: given["--collapsed-indicator"], expandedIndicator: given["--expanded-indicator"],
                accordion: try flag("--accordion", given["--accordion"]),
                busyThresholdMs: try number("--busy-threshold-ms", given["--busy-threshold-ms"]),
                showBusyIndicator: try flag("--show-busy-indicator", given["--show-busy-indicator"]),
                titleLines: try number("--title-lines", given["--title-lines"]))
            guard !patch.isEmpty else {
                if id != nil { throw UsageError("--id needs a setting to change (options without settings only prints them)") }
                return .options(options)
            }
            return change(.setOptions(patch))
        }
    }

    /// The value of `flag`: after `=`, or the next argument.
    private static func value(_ flag: String, inline: String?, _ arguments: [String], _ index: inout Int) throws(UsageError) -> String {
        if let inline { return inline }
        index += 1
        guard index < arguments.count else { throw UsageError("\(flag) needs a value") }
        return arguments[index]
    }

    /// `--key`: not empty when given.
    private static func key(_ text: String?) throws(UsageError) -> String? {
        guard let text else { return nil }
        guard !text.isEmpty else { throw UsageError("--key needs a key") }
        return text
    }

    /// A whole number from 0 to 2147483647 (`--index`, `--busy-threshold-ms`, `--title-lines`).
    private static func number(_ flag: String, _ text: String?) throws(UsageError) -> Int? {
        guard let text else { return nil }
        guard let number = Int(text), (0...Int(Int32.max)).contains(number) else {
            throw UsageError("\(flag) must be a whole number from 0 to \(Int32.max), not \"\(DisplayText.sanitize(text))\"")
        }
        return number
    }

    /// `on`/`off` (or `true`/`false`, `yes`/`no`).
    private static func flag(_ flag: String, _ text: String?) throws(UsageError) -> Bool? {
        guard let text else { return nil }
        switch text.lowercased() {
        case "on", "true", "yes": return true
        case "off", "false", "no": return false
        default: throw UsageError("\(flag) must be on or off, not \"\(DisplayText.sanitize(text))\"")
        }
    }

    /// "a", "a and b", "a, b and c".
    static func list(_ words: [String]) -> String {
        guard words.count > 1 else { return words.first ?? "" }
        return words.dropLast().joined(separator: ", ") + " and " + words[words.count - 1]
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
