// libFuzzer target for the configuration: the --config file, flags, FOLDTABLE_* variables and
// the validation after them (ConfigFile, ConfigParser, ConfigKey, ServerConfig; issue 29).
//
// Not a SwiftPM target: Tests/fuzz/run.sh builds FoldtableCore and FoldtableServer instrumented
// with -enable-testing and links this file against them.
//
// The first byte of an input picks what the rest is: 0, a config file's text; 1, command-line
// arguments, one a line; 2, environment variables, `NAME=value` a line. Each is read as
// `foldtabled --check-config` reads it. The target traps (a libFuzzer crash) when one of these
// does not hold:
// - nothing traps, whatever the text (a bad setting is one clear line, never a crash);
// - every line of a config file is an entry or a malformed line, never both, never lost; an
//   entry written back (`key = ` and `ConfigFile.quoted(value)`) reads back the same;
// - a configuration that parses validates, and the policy it asks for can be built;
// - its settings written out as a file (`settingsText`, what --check-config prints and calls
//   a valid config file) read back to the same value for every key.

import Foundation

@testable import FoldtableCore
@testable import FoldtableServer

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzConfig(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = UnsafeBufferPointer(start: data, count: size)
    guard let mode = input.first else { return 0 }
    let text = String(decoding: input.dropFirst(), as: UTF8.self)
    let parsed: ServerConfig.Parsed
    do {
        switch mode % 3 {
        case 0:
            checkFile(text)
            parsed = try ServerConfig.parse(arguments: ["--check-config", "--config", "fuzz.conf"], readFile: { _ in .success(text) })
        case 1:
            let arguments = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            parsed = try ServerConfig.parse(arguments: ["--check-config"] + arguments, readFile: { _ in .success("") })
        default:
            var environment: [String: String] = [:]
            for line in text.split(separator: "\n") {
                guard let equals = line.firstIndex(of: "=") else { continue }
                environment[String(line[..<equals])] = String(line[line.index(after: equals)...])
            }
            parsed = try ServerConfig.parse(arguments: ["--check-config"], environment: environment, readFile: { _ in .success("") })
        }
    } catch {
        require(!error.problems.isEmpty && error.problems.allSatisfy { !$0.isEmpty }, "a refusal without a reason")
        return 0
    }
    switch parsed {
    case .run(let config): checkConfig(config, sources: [:])
    case .check(let config, let sources): checkConfig(config, sources: sources)
    case .help, .helpMarkdown, .helpEnvironment: break
    }
    return 0
}

/// Every line is accounted for once, and every entry reads back from its written form.
private func checkFile(_ text: String) {
    let file = ConfigFile(text: text)
    let entryLines = file.entries.map(\.line)
    let malformedLines = file.malformed.map(\.line)
    require(Set(entryLines).count == entryLines.count, "a line read as two entries")
    require(Set(entryLines).isDisjoint(with: malformedLines), "a line read as an entry and as malformed")
    for entry in file.entries {
        require(!entry.key.isEmpty, "an entry without a key on line \(entry.line)")
        let written = "\(entry.key) = \(ConfigFile.quoted(entry.value))"
        let back = ConfigFile(text: written)
        require(
            back.malformed.isEmpty && back.entries.count == 1 && back.entries.first?.key == entry.key
                && back.entries.first?.value.unicodeScalars.elementsEqual(entry.value.unicodeScalars) == true,
            "line \(entry.line) written back as \(String(reflecting: written)) reads as \(back.entries) \(back.malformed)")
    }
}

/// A parsed configuration validates, builds its policy, and reads back from its settings text.
private func checkConfig(_ config: ServerConfig, sources: [String: String]) {
    require(config.problems().isEmpty, "a parsed configuration does not validate: \(config.problems())")
    _ = RequestPolicy(config)
    // A secret is never written out: a configuration with one cannot be read back from the text.
    guard !ServerConfig.keys.contains(where: { $0.isSecret && $0.isSet(in: config) }) else { return }
    let text = config.settingsText(sources: sources)
    let again: ServerConfig
    do {
        switch try ServerConfig.parse(arguments: ["--config", "settings.conf"], readFile: { _ in .success(text) }) {
        case .run(let parsed): again = parsed
        default: fatalError("fuzz invariant: the settings text reads as a request for help")
        }
    } catch {
        fatalError("fuzz invariant: the settings text does not read back: \(error.problems)\n\(text)")
    }
    for key in ServerConfig.keys where !key.isSecret {
        let before = key.value(in: config)
        let after = key.value(in: again)
        require(
            before.unicodeScalars.elementsEqual(after.unicodeScalars),
            "\(key.name) is \(String(reflecting: before)) but reads back from the settings text as \(String(reflecting: after))")
    }
}
