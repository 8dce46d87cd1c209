// Working out how to take a change back: read what it will overwrite before it is applied
// (`undoPrelude`), then, from that and the event, both directions (`undoRecord`). Kept apart
// from applying so that a change nobody will undo costs nothing here.

extension Table {
    /// What `change` will overwrite, read now, before it is applied: the half of its
    /// ``UndoRecord`` that the event will not carry. Cheap: values are shared, not copied (a
    /// section about to be removed keeps its rows' storage alive, no more).
    public func undoPrelude(for change: Change) -> UndoPrelude {
        func position(_ ref: SectionRef) -> Int? { try? self.position(of: ref) }
        switch change {
        case .toggle, .setCollapsed, .setAll, .reveal, .addSection, .addRow, .removeRow, .moveRow: return .none
        case .removeSection(let ref):
            guard let index = position(ref) else { return .notRecorded }
            if sections[index].rows.count > UndoRecord.maxRows { return .tooLarge }
            return .section(sections[index], index: index)
        case .updateSection(let ref, _), .moveSection(let ref, _):
            guard let index = position(ref) else { return .notRecorded }
            var header = sections[index]
            header.rows = []
            return .header(header, index: index)
        case .updateRow(let key, _):
            guard let section = sectionKey(ofRow: key), let row = self.section(section)?.rows.first(where: { $0.key == key }) else {
                return .notRecorded
            }
            return .row(row, section: section)
        case .setOptions: return .options(options)
        case .importRows(let ref, let imported):
            guard let index = position(ref) else { return .notRecorded }
            if sections[index].rows.count > UndoRecord.maxRows || imported.rows.count > UndoRecord.maxRows { return .tooLarge }
            return .rows(sections[index].rows)
        case .undo: return .notRecorded
        }
    }

    /// Both directions of `event`, just applied to this table, given what ``undoPrelude(for:)``
    /// read before it; `nil` for an undo or redo (they move their record instead) and when the
    /// prelude says the change was not recorded.
    public func undoRecord(for event: TableEvent, prelude: UndoPrelude) -> UndoRecord? {
        if case .notRecorded = prelude { return nil }
        if case .tooLarge = prelude {
            return UndoRecord(seq: event.seq, kind: event.change.typeName, backward: UndoStep(), forward: UndoStep(), tooLarge: true)
        }
        // A change that only set states: its event's states are the whole record.
        if event.change.isCollapseOnly {
            guard !event.collapsed.isEmpty else { return nil }  // changed nothing: nothing to undo
            return UndoRecord(seq: event.seq, kind: event.change.typeName, collapsed: event.collapsed)
        }
        // Collapsed states the change altered: taken back exactly, whatever altered them
        // (accordion, for an added section or options).
        var before = CollapseEffects()
        var was: [UndoExpectation] = []
        var now: [UndoExpectation] = []
        for effect in event.collapsed {
            before.append(CollapseEffect(key: effect.key, collapsed: !effect.collapsed))
            was.append(.collapsed(key: effect.key, collapsed: !effect.collapsed))
            now.append(.collapsed(key: effect.key, collapsed: effect.collapsed))
        }
        var backward = UndoStep(restore: before, expect: now)
        var forward = UndoStep(restore: event.collapsed, expect: was)
        switch (event.change, prelude) {
        case (.toggle, _), (.setCollapsed, _), (.setAll, _), (.reveal, _):
            guard !event.collapsed.isEmpty else { return nil }  // changed nothing: nothing to undo

        case (.addSection(let new), _):
            guard let key = new.key, let section = section(key) else { return nil }
            backward.changes = [.removeSection(section: .key(key))]
            // Rows added to it since are someone's work: not removed by an undo.
            backward.expect += [
                .section(key: key, title: section.title, detail: section.detail, footer: section.footer),
                .rows(section: key, count: 0, digest: Self.rowsDigest([])),
            ]
            forward.changes = [event.change]
            forward.expect.append(.noSection(key: key))

        case (.removeSection(.key(let key)), .section(let section, let index)):
            var added = NewSection(
                key: key, title: section.title, detail: section.detail, footer: section.footer, collapsed: section.collapsed, index: index)
            added.index = index
            backward.changes = [.addSection(added)]
            if !section.rows.isEmpty {
                let rows = section.rows.map { NewRow(key: $0.key, label: $0.label, value: $0.value, detail: $0.detail) }
                backward.changes.append(.importRows(section: .key(key), rows: RowImport(rows: rows, replace: true)))
            }
            backward.expect.append(.noSection(key: key))
            forward.changes = [event.change]
            forward.expect += [
                .section(key: key, title: section.title, detail: section.detail, footer: section.footer),
                .rows(section: key, count: section.rows.count, digest: Self.rowsDigest(section.rows)),
            ]

        case (.updateSection(.key(let key), let patch), .header(let old, _)):
            guard let current = section(key) else { return nil }
            backward.changes = [
                .updateSection(
                    section: .key(key),
                    patch: SectionPatch(
                        title: patch.title == nil ? nil : old.title, detail: patch.detail == nil ? nil : .some(old.detail),
                        footer: patch.footer == nil ? nil : .some(old.footer)))
            ]
            backward.expect.append(.section(key: key, title: current.title, detail: current.detail, footer: current.footer))
            forward.changes = [event.change]
            forward.expect.append(.section(key: key, title: old.title, detail: old.detail, footer: old.footer))

        case (.moveSection(.key(let key), let index), .header(_, let from)):
            backward.changes = [.moveSection(section: .key(key), index: from)]
            forward.changes = [.moveSection(section: .key(key), index: index)]

        case (.addRow(.key(let sectionKey), let new), _):
            guard let key = new.key else { return nil }
            let row = Row(key: key, label: new.label, value: new.value, detail: new.detail)
            backward.changes = [.removeRow(row: key)]
            backward.expect.append(.row(row, section: sectionKey))
            forward.changes = [event.change]

        case (.removeRow(let key), _):
            guard let from = event.from else { return nil }
            let row = NewRow(key: key, label: from.row.label, value: from.row.value, detail: from.row.detail, index: from.index)
            backward.changes = [.addRow(section: .key(from.section), row: row)]
            forward.changes = [event.change]
            forward.expect.append(.row(from.row, section: from.section))

        case (.updateRow(let key, let patch), .row(let old, let sectionKey)):
            guard let current = self.section(sectionKey)?.rows.first(where: { $0.key == key }) else { return nil }
            backward.changes = [
                .updateRow(
                    row: key,
                    patch: RowPatch(
                        label: patch.label == nil ? nil : old.label, value: patch.value == nil ? nil : old.value,
                        detail: patch.detail == nil ? nil : .some(old.detail)))
            ]
            backward.expect.append(.row(current, section: sectionKey))
            forward.changes = [event.change]
            forward.expect.append(.row(old, section: sectionKey))

        case (.moveRow(let key, .key(let to), let index), _):
            guard let from = event.from else { return nil }
            backward.changes = [.moveRow(row: key, section: .key(from.section), index: from.index)]
            backward.expect.append(.row(from.row, section: to))
            forward.changes = [.moveRow(row: key, section: .key(to), index: index)]
            forward.expect.append(.row(from.row, section: from.section))

        case (.setOptions(let patch), .options(let old)):
            backward.changes = [.setOptions(Self.patch(restoring: old, fieldsOf: patch))]
            backward.expect.append(.options(options))
            forward.changes = [event.change]
            forward.expect.append(.options(old))

        case (.importRows(.key(let key), let imported), .rows(let old)):
            guard let section = section(key) else { return nil }
            let rows = old.map { NewRow(key: $0.key, label: $0.label, value: $0.value, detail: $0.detail) }
            backward.changes = [.importRows(section: .key(key), rows: RowImport(rows: rows, replace: true))]
            backward.expect.append(.rows(section: key, count: section.rows.count, digest: Self.rowsDigest(section.rows)))
            forward.changes = [.importRows(section: .key(key), rows: imported)]
            forward.expect.append(.rows(section: key, count: old.count, digest: Self.rowsDigest(old)))

        default:
            return nil
        }
        return UndoRecord(seq: event.seq, kind: event.change.typeName, backward: backward, forward: forward)
    }

    /// The options `patch` set, as `old` had them: setting these takes the patch back.
    private static func patch(restoring old: TableOptions, fieldsOf patch: OptionsPatch) -> OptionsPatch {
        OptionsPatch(
            sectionsInitiallyCollapsed: patch.sectionsInitiallyCollapsed == nil ? nil : old.sectionsInitiallyCollapsed,
            collapsedIndicator: patch.collapsedIndicator == nil ? nil : old.collapsedIndicator,
            expandedIndicator: patch.expandedIndicator == nil ? nil : old.expandedIndicator,
            accordion: patch.accordion == nil ? nil : old.accordion,
            busyThresholdMs: patch.busyThresholdMs == nil ? nil : old.busyThresholdMs,
            showBusyIndicator: patch.showBusyIndicator == nil ? nil : old.showBusyIndicator,
            titleLines: patch.titleLines == nil ? nil : old.titleLines)
    }

    /// `change` with its target position brought within what the table holds now (rows or
    /// sections removed since the record was made): an undo puts things back as near as it can.
    func clampingPositions(_ change: Change) -> Change {
        switch change {
        case .addSection(var new):
            if let index = new.index { new.index = min(index, sections.count) }
            return .addSection(new)
        case .moveSection(let ref, let index):
            return .moveSection(section: ref, index: min(index, max(0, sections.count - 1)))
        case .addRow(.key(let key), var new):
            if let index = new.index, let section = section(key) { new.index = min(index, section.rows.count) }
            return .addRow(section: .key(key), row: new)
        case .moveRow(let row, .key(let key), let index?):
            guard let target = section(key) else { return change }
            let room = target.rows.count - (sectionKey(ofRow: row) == key ? 1 : 0)
            return .moveRow(row: row, section: .key(key), index: min(index, max(0, room)))
        default:
            return change
        }
    }

    /// A digest of rows' keys and values in order (FNV-1a, 64 bits): what an undo expects of a
    /// section's rows, in eight bytes instead of the rows.
    public static func rowsDigest(_ rows: [Row]) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        func add(_ text: String) {
            for byte in text.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
            hash = (hash ^ 0x1f) &* 0x100_0000_01b3
        }
        for row in rows {
            add(row.key)
            add(row.label)
            add(row.value)
            add(row.detail ?? "\u{0}")
        }
        return hash
    }
}
