/// A member of a session as others see it: the connection's client id and its display name.
/// Events name their author with it and presence lists their members.
public struct Author: Equatable, Sendable {
    public var client: String
    public var name: String

    public init(client: String, name: String) {
        self.client = client
        self.name = name
    }
}
