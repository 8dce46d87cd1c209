#!/usr/bin/env python3
"""Finds force unwraps (`x!`), `try!` and `as!` in Swift sources and fails unless the same line
carries a `// safe: why` comment saying why it cannot fail.

Comments and string literals (plain, multi-line, raw `#"..."#`, with interpolations) are skipped,
so `!=`, a prefix `!x`, `"Hi!"` and `// wow!` are not findings. Usage: traps.py DIR_OR_FILE...
"""
import os
import re
import sys

IDENT = re.compile(r"[A-Za-z0-9_]")


def code_lines(text):
    """Yields (line number, code with literals blanked, comment text) for each line."""
    lines = text.split("\n")
    code = [[] for _ in lines]
    comment = ["" for _ in lines]
    i, line = 0, 0
    n = len(text)
    # A stack of contexts: ("code", depth) inside interpolations, ("string", hashes, multiline).
    stack = [("code", 0)]
    block_depth = 0

    def put(ch):
        code[line].append(ch)

    while i < n:
        ch = text[i]
        top = stack[-1]
        if ch == "\n":
            line += 1
            i += 1
            continue
        if block_depth:
            if text.startswith("*/", i):
                block_depth -= 1
                i += 2
            elif text.startswith("/*", i):
                block_depth += 1
                i += 2
            else:
                comment[line] += ch
                i += 1
            continue
        if top[0] == "code":
            if text.startswith("//", i):
                end = text.find("\n", i)
                end = n if end < 0 else end
                comment[line] += text[i:end]
                i = end
                continue
            if text.startswith("/*", i):
                block_depth = 1
                i += 2
                continue
            m = re.compile(r'(#*)("""|")').match(text, i)
            if m and (m.group(1) == "" or True):
                hashes = len(m.group(1))
                if hashes == 0 and m.group(2) is None:
                    pass
                multiline = m.group(2) == '"""'
                stack.append(("string", hashes, multiline))
                put('"')
                i = m.end()
                continue
            if ch == "(" and top[1] >= 0:
                stack[-1] = ("code", top[1] + 1)
            elif ch == ")":
                if top[1] == 0 and len(stack) > 1:
                    stack.pop()  # end of an interpolation
                    put(")")
                    i += 1
                    continue
                stack[-1] = ("code", top[1] - 1)
            put(ch)
            i += 1
            continue
        # Inside a string literal.
        _, hashes, multiline = top
        closing = ('"""' if multiline else '"') + "#" * hashes
        if text.startswith("\\" + "#" * hashes + "(", i):
            stack.append(("code", 0))
            i += 2 + hashes
            put("(")
            continue
        if text.startswith("\\" + "#" * hashes, i) and hashes == 0:
            i += 2  # an escape: skip the escaped character
            continue
        if text.startswith(closing, i):
            stack.pop()
            put('"')
            i += len(closing)
            continue
        i += 1
    return [(index + 1, "".join(code[index]), comment[index]) for index in range(len(lines))]


SAFE = re.compile(r"//.*\bsafe:\s*\S")  # `// safe:` and a reason
FORCE = re.compile(r"\btry!|\bas!|(?<=[A-Za-z0-9_)\]?>])!(?!=)")


def findings(path):
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    for number, code, comment in code_lines(text):
        for match in FORCE.finditer(code):
            # `x!` needs the operand right before it; `!` after a keyword is a prefix (`return !x`).
            before = code[: match.start()]
            word = re.search(r"[A-Za-z_][A-Za-z0-9_]*$", before)
            if match.group(0) == "!" and word and word.group(0) in ("return", "in", "case", "where", "if", "guard", "while", "try", "await"):
                continue
            if SAFE.search(comment):
                continue
            yield number, code.strip()
            break


# The check's own cases, run first on every use: what must be found, and what must not.
MUST_FIND = [
    "let n = Int(x)!",
    "let v = dict[key]!.count",
    "let t = try! decode()",
    "let c = value as! Int",
    "let s = f(a)!  // a comment without the word",
    'let s = "a\\(b!)c"',
    "let p = base!.pointee",
    "x = y?.z!",
    "let n = Int(x)!  // safe:",
]
MUST_PASS = [
    "if a != b { return !flag }",
    "guard !x.isEmpty, !(y) else { return }",
    'let s = "Hi! x! try! as!"',
    "let r = #\"a\"b!\"#",
    "// wow! Int(x)!",
    "/* Int(x)! */ let a = 1",
    'let m = """\n  Int(x)! as! try!\n  """',
    "let n = Int(x)!  // safe: x is 1 to 3 ASCII digits",
    "let z = a !== b",
    "return !done && x != 1",
]


def self_test():
    import tempfile
    failed = []
    for sample, expected in [(s, True) for s in MUST_FIND] + [(s, False) for s in MUST_PASS]:
        with tempfile.NamedTemporaryFile("w", suffix=".swift", delete=False) as handle:
            handle.write(sample + "\n")
        found = bool(list(findings(handle.name)))
        os.unlink(handle.name)
        if found != expected:
            failed.append(("missed: " if expected else "false positive: ") + sample)
    for line in failed:
        print("traps self-test " + line)
    return not failed


def main(roots):
    if not self_test():
        print("traps: the check itself is wrong (self-test failed)")
        return 1
    bad = 0
    for root in roots:
        paths = [root] if os.path.isfile(root) else [
            os.path.join(d, f) for d, _, files in os.walk(root) for f in sorted(files) if f.endswith(".swift")]
        for path in sorted(paths):
            for number, code in findings(path):
                print(f"{path}:{number}: force unwrap, try! or as! without a '// safe: why' comment: {code}")
                bad += 1
    if bad:
        print(f"traps: {bad} unexplained force unwrap(s); handle the nil/error or say on the line why it cannot fail")
        return 1
    print("traps: no unexplained force unwraps, try! or as! in " + " ".join(roots))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["Sources"]))
