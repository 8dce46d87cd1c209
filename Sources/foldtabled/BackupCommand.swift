import FoldtableServer
import FoldtableStore
import Foundation

/// `foldtabled backup DEST [--data-dir DIR]`: copies the database with SQLite's online backup
/// (a consistent snapshot; a running server is not disturbed). Restoring the copy as
/// `foldtable.db` gives every session a new epoch, so clients that saw a later history start
/// afresh instead of resuming into one that diverged.
enum BackupCommand {
    static func run(_ arguments: [String], environment: [String: String]) -> Never {
        guard let destination = arguments.first, !destination.hasPrefix("--") else {
            fail("usage: foldtabled backup DEST [--data-dir DIR]   (DEST must not exist)")
        }
        let config: ServerConfig
        do {
            guard case .run(let parsed) = try ServerConfig.parse(arguments: Array(arguments.dropFirst()), environment: environment) else {
                print("usage: foldtabled backup DEST [--data-dir DIR]   (DEST must not exist)")
                exit(0)
            }
            config = parsed
        } catch {
            fail(error.description)
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
