/// The content of the `demo` session, from the examples the idea came from: products (Mac, iPad,
/// iPhone), provinces with their cities, friend groups, an empty section, and one large section
/// for trying the busy indicator and row streaming.
public enum DemoTable {
    /// Rows of the large section. Default 50,000.
    public static func make(options: TableOptions = TableOptions(), largeRows: Int = 50_000) -> Table {
        var sections: [Section] = []
        func rows(_ prefix: String, _ items: [(String, String, String?)]) -> [Row] {
            items.enumerated().map { Row(key: "\(prefix)\($0.offset + 1)", label: $0.element.0, value: $0.element.1, detail: $0.element.2) }
        }
        sections.append(
            Section(
                key: "mac", title: "Mac", detail: "4 models", footer: "Desktops and laptops",
                rows: rows(
                    "mac-",
                    [
                        ("MacBook Air", "M3", "13-inch and 15-inch"), ("MacBook Pro", "M4 Pro", "14-inch and 16-inch"),
                        ("iMac", "M4", "24-inch"), ("Mac mini", "M4", nil),
                    ])))
        sections.append(
            Section(
                key: "ipad", title: "iPad", detail: "4 models",
                rows: rows(
                    "ipad-",
                    [("iPad Pro", "M4", "11-inch and 13-inch"), ("iPad Air", "M2", nil), ("iPad", "A16", nil), ("iPad mini", "A17 Pro", nil)])))
        sections.append(
            Section(
                key: "iphone", title: "iPhone", detail: "3 models", collapsed: true,
                rows: rows("iphone-", [("iPhone 16 Pro", "A18 Pro", nil), ("iPhone 16", "A18", nil), ("iPhone SE", "A15", nil)])))
        let provinces: [(String, String, [String])] = [
            ("guangdong", "Guangdong", ["Guangzhou", "Shenzhen", "Zhuhai", "Foshan"]),
            ("zhejiang", "Zhejiang", ["Hangzhou", "Ningbo", "Wenzhou"]),
            ("sichuan", "Sichuan", ["Chengdu", "Mianyang", "Leshan"]),
        ]
        for (key, name, cities) in provinces {
            sections.append(
                Section(
                    key: key, title: "Province\n\(name)", detail: "\(cities.count) cities", collapsed: true,
                    rows: cities.enumerated().map { Row(key: "\(key)-\($0.offset + 1)", label: $0.element, value: "") }))
        }
        sections.append(
            Section(
                key: "friends", title: "Friends", detail: "online", footer: "Groups you belong to", collapsed: true,
                rows: rows("friends-", [("Climbing club", "6", "members"), ("Book circle", "4", "members"), ("Family", "9", "members")])))
        sections.append(Section(key: "empty", title: "Empty section", detail: "no rows yet", footer: "Add a row to fill it"))
        sections.append(
            Section(
                key: "big", title: "Inventory", detail: "\(largeRows) items", footer: "A large section: expanding it streams its rows",
                collapsed: true,
                rows: (0..<largeRows).map { Row(key: "big-\($0)", label: "Item \($0)", value: String($0 % 1000)) }))
        // Keys are unique by construction.
        return try! Table(options: options, sections: sections, seq: 0)
    }
}
