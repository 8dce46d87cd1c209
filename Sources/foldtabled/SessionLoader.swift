import FoldtableCore
import FoldtableServer
import Foundation

/// Sessions that exist from the start: the demo, and tables named by `--load`, each created
/// when the store has none of that name yet.
enum SessionLoader {
    /// `--load NAME=PATH`: reads and imports each file (CSV by extension, else the JSON
    /// document); a file that cannot be read or imported is a start-up failure naming it.
    static func loadFiles(into hub: Hub, config: ServerConfig) throws(LoadFailure) {
        for item in config.loadTables {
            let parts = item.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { continue }  // validate() refused it already
            let (name, path) = (parts[0], parts[1])
            guard let data = FileManager.default.contents(atPath: path) else { throw LoadFailure("--load \(name): cannot read \(path)") }
            guard data.count <= 256 * 1_048_576 else { throw LoadFailure("--load \(name): \(path) is over 256 MiB") }
            let table: Table
            do throws(ProtocolError) {
                var options = TableOptions()
                options.busyThresholdMs = config.busyThresholdMs
                table =
                    path.lowercased().hasSuffix(".csv")
                    ? try CSVTable.decode(data, options: options, limits: config.tableLimits)
                    : try TableDocument.decode(data, limits: config.tableLimits)
            } catch {
                throw LoadFailure("--load \(name): \(path): \(error.message)")
            }
            let log = Log(level: config.logLevel)
            hub.createSessionIfAbsent(name, table: table) { result in
                // A skipped file is not an error (a restart finds what the first start loaded, and
                // later changes must not be overwritten), but the operator asked for this file
                // and did not get it: a warning, so one who edited the file and restarted sees
                // why the table did not change.
                switch result {
                case .success(true): log(.info, "load", ["session": name, "path": path])
                case .success(false): log(.warning, "load_skipped", ["reason": "exists", "session": name, "path": path])
                case .failure(let error): log(.warning, "load_failed", ["session": name, "path": path, "reason": error.message])
                }
            }
        }
    }

    /// Why a `--load` file stopped start-up: one line for the operator.
    struct LoadFailure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    static func loadDemo(into hub: Hub, config: ServerConfig) {
        var options = TableOptions()
        options.busyThresholdMs = config.busyThresholdMs
        let largeRows = min(config.demoLargeRows, config.tableLimits.maxRowsPerSection)
        hub.createSessionIfAbsent("demo", table: DemoTable.make(options: options, largeRows: largeRows))
    }
}
