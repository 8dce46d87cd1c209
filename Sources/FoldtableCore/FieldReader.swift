/// Reads typed fields out of a decoded JSON object, turning every absence or type mismatch into a
/// ``ProtocolError`` that names the field.
public struct FieldReader {
    public let members: [(String, JSONValue)]
    /// A prefix for field names in errors (e.g. `"set."`), so nested fields are named in full.
    public let path: String

    public init(_ value: JSONValue, path: String = "") throws(ProtocolError) {
        guard case .object(let members) = value else {
            let what = path.isEmpty ? "a message" : String(path.dropLast())
            throw ProtocolError(
                .wrongType, "\(what) must be a JSON object, not \(value.typeName)", field: path.isEmpty ? nil : String(path.dropLast()))
        }
        self.members = members
        self.path = path
    }

    public func value(_ name: String) -> JSONValue? {
        for (key, value) in members where key == name { return value }
        return nil
    }

    public func has(_ name: String) -> Bool { value(name) != nil }

    /// The object this reader reads, as a value again (to hand to a decoder taking a value).
    public var asValue: JSONValue { .object(members) }

    private func wrongType(_ name: String, _ expected: String, _ found: JSONValue) -> ProtocolError {
        ProtocolError(.wrongType, "\(path)\(name) must be \(expected), not \(found.typeName)", field: path + name)
    }

    private func missing(_ name: String) -> ProtocolError {
        ProtocolError(.missingField, "\(path)\(name) is missing", field: path + name)
    }

    public func string(_ name: String) throws(ProtocolError) -> String {
        guard let value = value(name) else { throw missing(name) }
        guard case .string(let text) = value else { throw wrongType(name, "a string", value) }
        return text
    }

    public func optionalString(_ name: String) throws(ProtocolError) -> String? {
        guard let value = value(name), value != .null else { return nil }
        guard case .string(let text) = value else { throw wrongType(name, "a string", value) }
        return text
    }

    /// Absent -> `nil` (leave as is); `null` -> `.some(nil)` (clear); a string -> `.some(text)`.
    public func clearableString(_ name: String) throws(ProtocolError) -> String?? {
        guard let value = value(name) else { return nil }
        if value == .null { return .some(nil) }
        guard case .string(let text) = value else { throw wrongType(name, "a string or null", value) }
        return .some(text)
    }

    public func bool(_ name: String) throws(ProtocolError) -> Bool {
        guard let value = value(name) else { throw missing(name) }
        guard case .bool(let flag) = value else { throw wrongType(name, "true or false", value) }
        return flag
    }

    public func optionalBool(_ name: String) throws(ProtocolError) -> Bool? {
        guard let value = value(name), value != .null else { return nil }
        guard case .bool(let flag) = value else { throw wrongType(name, "true or false", value) }
        return flag
    }

    public func integer(_ name: String) throws(ProtocolError) -> Int64 {
        guard let value = value(name) else { throw missing(name) }
        guard case .integer(let number) = value else { throw wrongType(name, "an integer", value) }
        return number
    }

    public func optionalInteger(_ name: String) throws(ProtocolError) -> Int64? {
        guard let value = value(name), value != .null else { return nil }
        guard case .integer(let number) = value else { throw wrongType(name, "an integer", value) }
        return number
    }

    /// An integer that must fit `Int` and lie in `range`.
    public func optionalIndex(_ name: String, in range: ClosedRange<Int64> = 0...Int64(Int32.max)) throws(ProtocolError) -> Int? {
        guard let number = try optionalInteger(name) else { return nil }
        guard range.contains(number) else {
            throw ProtocolError(.invalidValue, "\(path)\(name) must be between \(range.lowerBound) and \(range.upperBound)", field: path + name)
        }
        return Int(number)
    }

    public func object(_ name: String) throws(ProtocolError) -> FieldReader {
        guard let value = value(name) else { throw missing(name) }
        guard case .object = value else { throw wrongType(name, "an object", value) }
        return try FieldReader(value, path: path + name + ".")
    }

    public func array(_ name: String) throws(ProtocolError) -> [JSONValue] {
        guard let value = value(name) else { throw missing(name) }
        guard case .array(let elements) = value else { throw wrongType(name, "an array", value) }
        return elements
    }

    /// A section reference: `section` (a key) or `title`. Exactly one must be present.
    public func sectionRef() throws(ProtocolError) -> SectionRef {
        let key = try optionalString("section")
        let title = try optionalString("title")
        switch (key, title) {
        case (let key?, nil): return .key(key)
        case (nil, let title?): return .title(title)
        case (nil, nil): throw ProtocolError(.missingField, "\(path)section is missing (give a section key, or a title)", field: path + "section")
        case (_?, _?): throw ProtocolError(.invalidValue, "give either section or title, not both", field: path + "title")
        }
    }
}
