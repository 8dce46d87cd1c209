import FoldtableAuth
import FoldtableServer
import Foundation

/// The token verifier the configuration asks for: none (open mode), or HS256 with the secret
/// from `--token-secret-file` or `FOLDTABLE_TOKEN_SECRET`.
enum TokenSetup {
    /// A shorter HMAC-SHA256 key is easier to guess than the hash is to break.
    static let minimumSecretBytes = 32

    struct Refused: Error, CustomStringConvertible {
        let description: String
    }

    static func secret(_ config: ServerConfig) throws(Refused) -> [UInt8]? {
        var text: String
        if let path = config.tokenSecretFile {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw Refused(description: "cannot read the token secret file \(path)")
            }
            text = String(decoding: data, as: UTF8.self)
        } else if let value = config.tokenSecret {
            text = value
        } else {
            return nil
        }
        text = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.utf8.count >= minimumSecretBytes else {
            throw Refused(description: "the token secret must be at least \(minimumSecretBytes) bytes (try: openssl rand -hex 32)")
        }
        return Array(text.utf8)
    }

    static func verifier(_ config: ServerConfig) throws(Refused) -> TokenVerifier? {
        try secret(config).map { HMACTokens(secret: $0) }
    }
}
