/// What a node needs to share its sessions with other nodes: its id and the broker that orders
/// the sessions' changes (see the article "More than one machine").
public struct Cluster {
    /// This node's id: unique among the nodes sharing `broker`; it qualifies authors and
    /// request origins.
    public var node: String
    public var broker: Broker

    public init(node: String, broker: Broker) {
        self.node = node
        self.broker = broker
    }
}
