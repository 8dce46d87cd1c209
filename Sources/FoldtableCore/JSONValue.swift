/// A parsed JSON value.
///
/// The core parses and writes JSON itself instead of using `JSONSerialization` or `Codable`:
/// decoding must be strict with typed errors that name the field, enforce depth and length limits
/// before allocating, and encoding must be byte-identical everywhere (field order fixed) and fast
/// enough to encode hundreds of thousands of events per second on one core.
public enum JSONValue: Equatable, Sendable {
    case null
    case bool(Bool)
    /// A number written without fraction or exponent that fits in 64 bits.
    case integer(Int64)
    /// Any other number.
    case double(Double)
    case string(String)
    case array([JSONValue])
    /// Members in the order they were written. Duplicate names are rejected by the parser.
    case object([(String, JSONValue)])

    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case (.bool(let a), .bool(let b)): return a == b
        case (.integer(let a), .integer(let b)): return a == b
        case (.double(let a), .double(let b)): return a == b
        case (.string(let a), .string(let b)): return a == b
        case (.array(let a), .array(let b)): return a == b
        case (.object(let a), .object(let b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: return false
        }
    }

    /// The member named `name` of an object, or `nil`.
    public subscript(name: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        for (key, value) in members where key == name { return value }
        return nil
    }

    /// A short name of the value's JSON type, for error messages.
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "boolean"
        case .integer, .double: return "number"
        case .string: return "string"
        case .array: return "array"
        case .object: return "object"
        }
    }
}
