/// Who made a change: the connection's client id and its display name.
public struct Author: Equatable, Sendable {
    public var client: String
    public var name: String

    public init(client: String, name: String) {
        self.client = client
        self.name = name
    }
}
