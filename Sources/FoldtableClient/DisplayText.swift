/// Text as a terminal shows it: what is safe to print, and how many columns it takes.
///
/// Everything the server sends (titles, labels, values, names) passes through ``sanitize(_:)``
/// before it reaches the screen: a title holding an escape sequence must not be able to move the
/// cursor, retitle the window or hide text. Column widths follow the usual `wcwidth` rules
/// closely enough for tables: East Asian wide characters and emoji take two columns, combining
/// marks and format characters none.
public enum DisplayText {
    /// `text` with control characters (C0, DEL, C1) and bidirectional overrides replaced by
    /// `?`, tabs by a space. Line breaks are replaced too: callers split lines first.
    public static func sanitize(_ text: String) -> String {
        var needsWork = false
        for scalar in text.unicodeScalars where isUnsafe(scalar) || scalar == "\t" {
            needsWork = true
            break
        }
        guard needsWork else { return text }
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            if scalar == "\t" {
                out.append(" ")
            } else if isUnsafe(scalar) {
                out.append("?")
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }

    private static func isUnsafe(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: return true
        // Bidirectional embeddings, overrides and isolates: they reorder what follows on screen.
        case 0x202A...0x202E, 0x2066...0x2069: return true
        default: return false
        }
    }

    /// Columns `text` takes (after ``sanitize(_:)``).
    public static func width(_ text: String) -> Int {
        var total = 0
        for character in text { total += width(character) }
        return total
    }

    /// Columns one character (grapheme cluster) takes: 0, 1 or 2.
    public static func width(_ character: Character) -> Int {
        var sawBase = false
        for scalar in character.unicodeScalars {
            if isWide(scalar) { return 2 }
            if !isZeroWidth(scalar) { sawBase = true }
        }
        return sawBase ? 1 : 0
    }

    private static func isZeroWidth(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .nonspacingMark, .enclosingMark, .format: return true
        default: return scalar.value >= 0x1160 && scalar.value <= 0x11FF  // Hangul jamo medial/final
        }
    }

    private static func isWide(_ scalar: Unicode.Scalar) -> Bool {
        let value = scalar.value
        if value < 0x1100 { return false }
        if scalar.properties.isEmojiPresentation { return true }
        switch value {
        case 0x1100...0x115F, 0x2E80...0x303E, 0x3041...0x33FF, 0x3400...0x4DBF, 0x4E00...0x9FFF, 0xA000...0xA4CF,
            0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE30...0xFE4F, 0xFF00...0xFF60, 0xFFE0...0xFFE6, 0x1F300...0x1F64F,
            0x1F900...0x1F9FF, 0x20000...0x2FFFD, 0x30000...0x3FFFD:
            return true
        default:
            return false
        }
    }

    /// `text` cut to at most `columns` columns, ending with "…" when it was cut.
    public static func truncate(_ text: String, to columns: Int) -> String {
        guard columns > 0 else { return "" }
        if width(text) <= columns { return text }
        var out = ""
        var used = 0
        for character in text {
            let next = width(character)
            if used + next > columns - 1 { break }
            out.append(character)
            used += next
        }
        return out + "…"
    }

    /// `text` cut or padded with spaces to exactly `columns` columns.
    public static func fit(_ text: String, to columns: Int) -> String {
        let cut = truncate(text, to: columns)
        let missing = columns - width(cut)
        return missing > 0 ? cut + String(repeating: " ", count: missing) : cut
    }
}
