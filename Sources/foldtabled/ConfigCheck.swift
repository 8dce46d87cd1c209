import FoldtableRedis
import FoldtableServer
import Foundation

/// What only a look at the machine can tell about a configuration: whether the files and
/// directories it names are there and readable. Start-up and `--check-config` both run it, so a
/// configuration that passes the check gets a server past reading its settings.
enum ConfigCheck {
    /// One line per problem. `storage` also looks at the data directory: start-up leaves that to
    /// the store (opening the database is the real test, and creates it), but a check must not
    /// create anything.
    static func problems(_ config: ServerConfig, storage: Bool) -> [String] {
        var found: [String] = []
        let files = FileManager.default
        var isDirectory: ObjCBool = false
        if !config.webRoot.isEmpty && !(files.fileExists(atPath: config.webRoot, isDirectory: &isDirectory) && isDirectory.boolValue) {
            found.append("--web-root \(config.webRoot) is not a directory")
        }
        // One line for both: a certificate and its key are usually moved (or lost) together.
        for item in config.loadTables {
            let path = item.split(separator: "=", maxSplits: 1).dropFirst().first.map(String.init) ?? ""
            if !path.isEmpty && !files.isReadableFile(atPath: path) { found.append("--load \(item): cannot read \(path)") }
        }
        let unreadable = [config.tlsCertPath, config.tlsKeyPath].compactMap { $0 }.filter { !files.isReadableFile(atPath: $0) }
        if !unreadable.isEmpty {
            found.append("cannot read the TLS \(unreadable.count == 1 ? "file" : "files") \(unreadable.joined(separator: " and "))")
        }
        do {
            _ = try TokenSetup.secret(config)
        } catch {
            found.append(error.description)
        }
        if !config.redis.isEmpty {
            do {
                _ = try RedisURL(parsing: config.redis)
            } catch {
                found.append("--redis: \(error.message)")
            }
        }
        if !config.redisCluster.isEmpty {
            do {
                _ = try RedisClusterClient.Options(parsing: config.redisCluster)
            } catch {
                found.append("--redis-cluster: \(error.message)")
            }
        }
        if storage && !config.memoryOnly && config.redis.isEmpty && config.redisCluster.isEmpty,
            let problem = dataDirectoryProblem(config.dataDirectory)
        {
            found.append(problem)
        }
        return found
    }

    /// `foldtabled --check-config`: exits 0 printing `config ok` and every setting with where it
    /// came from (a valid config file, secrets left out), or 1 with one line per problem.
    static func run(_ config: ServerConfig, sources: [String: String]) -> Never {
        let found = problems(config, storage: true)
        guard found.isEmpty else { refuse(ServerConfig.Invalid(found)) }
        print("config ok")
        print(config.settingsText(sources: sources))
        exit(0)
    }

    /// Prints each problem as its own `foldtabled: ` line on stderr and exits 2 for a command
    /// line that could not be read, else 1.
    static func refuse(_ invalid: ServerConfig.Invalid) -> Never {
        for line in invalid.problems { FileHandle.standardError.write(Data("foldtabled: \(line)\n".utf8)) }
        exit(invalid.isUsage ? 2 : 1)
    }

    /// Why the store could not use `path`: the store creates the directory when its parent
    /// exists, and needs to write in it.
    private static func dataDirectoryProblem(_ path: String) -> String? {
        let files = FileManager.default
        var isDirectory: ObjCBool = false
        if files.fileExists(atPath: path, isDirectory: &isDirectory) {
            if !isDirectory.boolValue { return "--data-dir \(path) is not a directory" }
            return files.isWritableFile(atPath: path) ? nil : "--data-dir \(path) is not writable by this user"
        }
        let parent = (path as NSString).deletingLastPathComponent
        let base = parent.isEmpty ? "." : parent
        guard files.fileExists(atPath: base, isDirectory: &isDirectory), isDirectory.boolValue else {
            return "--data-dir \(path) does not exist, nor does \(base)"
        }
        return files.isWritableFile(atPath: base) ? nil : "--data-dir \(path) does not exist and cannot be created in \(base)"
    }
}
