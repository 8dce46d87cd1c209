"""With --huge-pages, foldtabled asks glibc's malloc for transparent huge pages by running itself again with
GLIBC_TUNABLES set (glibc reads it only at start): the same process, arguments and output."""
import asyncio
import os

from foldtabled import Client, Server

KERNEL_MODE = "/sys/kernel/mm/transparent_hugepage/enabled"


def kernel_gives_huge_pages():
    try:
        mode = open(KERNEL_MODE).read()
    except OSError:
        return False
    return "[always]" in mode or "[madvise]" in mode


def tunables_of(pid):
    """GLIBC_TUNABLES as the process was started with, None when it was not set. The dynamic
    loader splits the variable in place while it reads it (its colons become NULs in
    /proc/PID/environ), so the tunables after the first are the items that follow it."""
    items = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    for at, item in enumerate(items):
        if item.startswith(b"GLIBC_TUNABLES="):
            found = [item.split(b"=", 1)[1]]
            for following in items[at + 1:]:
                if not following.startswith(b"glibc."):
                    break
                found.append(following)
            return b":".join(found).decode()
    return None


def start_line_field(server, key):
    assert server.stop() == 0
    for line in server.proc.stderr.read().splitlines():
        if " event=start " in line:
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
            return fields.get(key)
    raise AssertionError("no start line in the log")


def without_tunables():
    env = dict(os.environ)
    env.pop("GLIBC_TUNABLES", None)
    return env


def test_the_server_runs_itself_again_with_huge_pages_asked_for_and_still_serves():
    server = Server("--memory", "--huge-pages", "--log-level", "info", env=without_tunables())
    try:
        # The process that printed the URL is the one started: running again kept its pid.
        tunables = tunables_of(server.proc.pid)
        if kernel_gives_huge_pages():
            assert tunables == "glibc.malloc.hugetlb=1"
        else:
            assert tunables is None

        async def scenario():
            ana = await Client.join(server.ws, session="demo", name="ana")
            await ana.close()

        asyncio.run(asyncio.wait_for(scenario(), 30))
    finally:
        state = start_line_field(server, "huge_pages")
    assert state == ("on" if kernel_gives_huge_pages() else "unavailable")


def test_an_operators_other_tunables_are_kept():
    env = without_tunables()
    env["GLIBC_TUNABLES"] = "glibc.malloc.arena_max=2"
    env["FOLDTABLE_HUGE_PAGES"] = "true"
    server = Server("--memory", env=env)
    try:
        expected = "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1" if kernel_gives_huge_pages() else "glibc.malloc.arena_max=2"
        assert tunables_of(server.proc.pid) == expected
    finally:
        server.stop()


def test_an_operators_own_hugetlb_setting_wins():
    env = without_tunables()
    env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=0"
    server = Server("--memory", "--huge-pages", "--log-level", "info", env=env)
    try:
        assert tunables_of(server.proc.pid) == "glibc.malloc.hugetlb=0"
    finally:
        state = start_line_field(server, "huge_pages")
    assert state == ("off" if kernel_gives_huge_pages() else "unavailable")


def test_by_default_and_with_huge_pages_false_malloc_is_left_as_it_is():
    server = Server("--memory", "--log-level", "info", env=without_tunables())
    try:
        assert tunables_of(server.proc.pid) is None
    finally:
        state = start_line_field(server, "huge_pages")
    assert state == "off"
    env = without_tunables()
    env["FOLDTABLE_HUGE_PAGES"] = "false"
    server = Server("--memory", "--huge-pages", "--huge-pages=false", "--log-level", "info", env=env)
    try:
        assert tunables_of(server.proc.pid) is None
    finally:
        state = start_line_field(server, "huge_pages")
    assert state == "off"
