import FoldtableCore

// MARK: - The change schemas: one per change type, as `Change.decode` reads a request

extension OpenAPIDocument {
    /// Each change type's fields as a member (or `POST .../changes`) sends them, by type name.
    /// A unit test decodes an example made from each schema's required fields through the
    /// server's own decoder, and the same without each required field: a schema can neither
    /// leave out a field the decoder needs nor require one it does not.
    static let changeTypes: [(type: String, properties: [(String, JSONValue)], required: [String], namesSection: Bool)] = [
        ("toggle", [], [], true),
        ("set", [("collapsed", Schema.boolean)], ["collapsed"], true),
        ("setAll", [("collapsed", Schema.boolean)], ["collapsed"], false),
        ("reveal", [("row", rowKey)], ["row"], false),
        (
            "addSection",
            [
                ("key", newKey), ("title", Schema.string), ("detail", Schema.string), ("footer", Schema.string), ("collapsed", Schema.boolean),
                ("index", index),
            ], ["title"], false
        ),
        ("removeSection", [], [], true),
        (
            "updateSection",
            [("set", Schema.object([("title", Schema.string), ("detail", clearable), ("footer", clearable)]))], ["set"], true
        ),
        ("moveSection", [("index", index)], ["index"], true),
        (
            "addRow", [("key", newKey), ("label", Schema.string), ("value", Schema.string), ("detail", Schema.string), ("index", index)],
            ["label"], true
        ),
        ("removeRow", [("row", rowKey)], ["row"], false),
        (
            "updateRow",
            [("row", rowKey), ("set", Schema.object([("label", Schema.string), ("value", Schema.string), ("detail", clearable)]))],
            ["row", "set"], false
        ),
        ("moveRow", [("row", rowKey), ("index", index)], ["row"], true),
        (
            "setOptions",
            [
                (
                    "options",
                    Schema.object([
                        ("sectionsInitiallyCollapsed", Schema.boolean), ("collapsedIndicator", Schema.string), ("expandedIndicator", Schema.string),
                        ("accordion", Schema.boolean), ("busyThresholdMs", index), ("showBusyIndicator", Schema.boolean), ("titleLines", index),
                    ])
                )
            ], ["options"], false
        ),
        (
            "importRows", [("rows", Schema.array(Schema.ref("Row"))), ("replace", Schema.boolean), ("count", index)], ["rows"], true
        ),
    ]

    private static let rowKey: JSONValue = .object([("type", .string("string")), ("description", .string("A row's key."))])
    private static let newKey: JSONValue = .object([
        ("type", .string("string")), ("description", .string("A key for it (else the table picks one).")),
    ])
    private static let index = Schema.integer(0...Int64(Int32.max))
    /// A text that `null` clears.
    private static let clearable = Schema.nullable("string")

    /// `Change` (one of the types, told apart by `type`) and one schema per type.
    static var changeComponents: [(String, JSONValue)] {
        var components: [(String, JSONValue)] = []
        var choices: [JSONValue] = []
        var mapping: [(String, JSONValue)] = []
        for change in changeTypes {
            let name = "Change" + change.type.prefix(1).uppercased() + change.type.dropFirst()
            choices.append(Schema.ref(name))
            mapping.append((change.type, .string("#/components/schemas/\(name)")))
            var properties: [(String, JSONValue)] = [
                ("type", .object([("const", .string(change.type))])),
                ("id", .object([("type", .string("string")), ("description", .string("A change id: a retry with it is applied once."))])),
            ]
            var members: [(String, JSONValue)] = [("type", .string("object"))]
            if change.namesSection {
                // `section` (a key) or `title`, exactly one.
                properties += [
                    ("section", .object([("type", .string("string")), ("description", .string("The section's key."))])),
                    ("title", .object([("type", .string("string")), ("description", .string("The section's title, instead of its key."))])),
                ]
                members.append(
                    (
                        "oneOf",
                        .array([.object([("required", .array([.string("section")]))]), .object([("required", .array([.string("title")]))])])
                    ))
            }
            properties += change.properties
            members.append(("properties", .object(properties)))
            members.append(("required", .array((["type"] + change.required).map(JSONValue.string))))
            components.append((name, .object(members)))
        }
        components.insert(
            (
                "Change",
                .object([
                    ("description", .string("One change of the protocol, told apart by `type` (see the protocol article).")),
                    ("oneOf", .array(choices)),
                    ("discriminator", .object([("propertyName", .string("type")), ("mapping", .object(mapping))])),
                ])
            ), at: 0)
        return components
    }
}
