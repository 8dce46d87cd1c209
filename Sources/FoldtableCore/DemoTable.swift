/// The content of the `demo` session, from the examples the idea came from:
///
/// - products (Mac, iPad, iPhone), as in the collapsible-table-section example, with details and
///   a footer;
/// - provinces and their cities, as in the grouped table example, under two-line titles
///   ("Province" and the name) like the original component's multi-line headers;
/// - QQ-style friend groups: each group a section, its friends as rows (value `online` or
///   `offline`, detail the line they set under their name), and "online/total" as the header
///   detail, e.g. "3/8";
/// - an empty section, and one large section for trying the busy indicator and row streaming.
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
        // Friend groups as QQ shows them: online friends first, each with the line they set under
        // their name, the header counting who is online.
        let groups: [(key: String, title: String, footer: String?, friends: [(String, Bool, String?)])] = [
            (
                "friends", "Friends", "Online friends first",
                [
                    ("Zhou Wei", true, "Exams are over!"), ("Li Chao", true, "Gone fishing"), ("Zhang Lu", true, "Busy, message me later"),
                    ("Tang Jin", false, nil), ("Liu Hu", false, "In Chengdu this week"), ("Li Yuan", false, nil),
                    ("Fan Liang", false, "Back on Monday"), ("Zhou Xinyun", false, nil),
                ]
            ),
            (
                "roommates", "Roommates", nil,
                [
                    ("Wang Lei", true, "Who took my charger?"), ("Chen Jie", true, nil), ("Zhao Peng", false, "Library until 10"),
                    ("Sun Hao", false, nil),
                ]
            ),
            (
                "climbing", "Climbing club", nil,
                [
                    ("Lin Na", true, "Bouldering on Saturday, 9:00"), ("Guo Qiang", false, nil), ("He Jing", false, "Resting a sore finger"),
                    ("Ma Lin", false, nil), ("Xu Bo", false, nil), ("Gao Yan", false, "New shoes!"),
                ]
            ),
        ]
        for group in groups {
            let online = group.friends.filter(\.1).count
            sections.append(
                Section(
                    key: group.key, title: group.title, detail: "\(online)/\(group.friends.count)", footer: group.footer, collapsed: true,
                    rows: rows("\(group.key)-", group.friends.map { ($0.0, $0.1 ? "online" : "offline", $0.2) })))
        }
        sections.append(Section(key: "empty", title: "Empty section", detail: "no rows yet", footer: "Add a row to fill it"))
        sections.append(
            Section(
                key: "big", title: "Inventory", detail: "\(largeRows) items", footer: "A large section: expanding it streams its rows",
                collapsed: true,
                rows: (0..<largeRows).map { Row(key: "big-\($0)", label: "Item \($0)", value: String($0 % 1000)) }))
        // Keys are unique by construction.
        return try! Table(options: options, sections: sections, seq: 0)  // safe: fixed demo data, tested valid
    }
}
