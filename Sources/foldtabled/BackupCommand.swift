import FoldtableServer
import FoldtableStore
import Foundation

/// `foldtabled backup DEST [--config FILE] [--data-dir DIR]`: copies the database with SQLite's online backup
/// (a consistent snapshot; a running server is not disturbed). Restoring the copy as
/// `foldtable.db` gives every session a new epoch, so clients that saw a later history start
/// afresh instead of resuming into one that diverged.
enum BackupCommand {
    /// The data directory may also come from a config file or the environment, as for the server.
    static let usage = "usage: foldtabled backup DEST [--config FILE] [--data-dir DIR]   (DEST must not exist)"

    static func run(_ arguments: [String], environment: [String: String]) -> Never {
        guard let destination = arguments.first, !destination.hasPrefix("--") else {
            fail(usage)
        }
        let config: ServerConfig
        do {
            switch try ServerConfig.parse(arguments: Array(arguments.dropFirst()), environment: environment) {
            case .run(let parsed): config = parsed
            case .help:
                print(usage)
                exit(0)
            case .check, .helpMarkdown, .helpEnvironment:
                fail("--check-config, --help-markdown and --help-env are options of the server, not of backup")
            }
        } catch {
            ConfigCheck.refuse(error)
        }
        do {
            try SQLiteStore.backup(directory: config.dataDirectory, to: destination)
        } catch {
            fail(error.description)
        }
        print("backed up \(config.dataDirectory) to \(destination)")
        exit(0)
    }

    private static func fail(_ line: String) -> Never {
        FileHandle.standardError.write(Data("foldtabled: \(line)\n".utf8))
        exit(1)
    }
}
