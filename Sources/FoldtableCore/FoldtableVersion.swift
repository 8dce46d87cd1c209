/// The version of this build of Foldtable (server, clients and protocol), as `foldtabled
/// --version` and `foldtable --version` print it. Bumped by hand with each release; the
/// protocol stays compatible within a major version.
public enum FoldtableVersion {
    public static let current = "0.5.0"
}
