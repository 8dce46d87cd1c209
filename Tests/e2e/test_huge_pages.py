"""With --huge-pages, foldtabled asks glibc's malloc for transparent huge pages by running itself again with
GLIBC_TUNABLES set (glibc reads it only at start): the same process, arguments and output."""
import asyncio
import os
import shutil
import subprocess
import tempfile

import pytest

from foldtabled import BIN, Client, Server

KERNEL_MODE = "/sys/kernel/mm/transparent_hugepage/enabled"


def kernel_mode():
    """always, madvise, never, or None when the kernel has no THP."""
    try:
        text = open(KERNEL_MODE).read()
    except OSError:
        return None
    for mode in ("always", "madvise", "never"):
        if f"[{mode}]" in text:
            return mode
    return None


def kernel_gives_huge_pages():
    """Whether glibc's tunable makes a difference here: only in madvise mode."""
    return kernel_mode() == "madvise"


def expected_state(when_asked):
    """The start line's huge_pages= for a server that wants them (its state then `when_asked`)."""
    if kernel_mode() == "always":
        return "kernel"
    return when_asked if kernel_gives_huge_pages() else "unavailable"


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
    assert state == expected_state("on")


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
    assert state == expected_state("off")


def test_by_default_and_with_huge_pages_false_malloc_is_left_as_it_is():
    server = Server("--memory", "--log-level", "info", env=without_tunables())
    try:
        assert tunables_of(server.proc.pid) is None
    finally:
        state = start_line_field(server, "huge_pages")
    assert state == ("kernel" if kernel_mode() == "always" else "off")
    env = without_tunables()
    env["FOLDTABLE_HUGE_PAGES"] = "false"
    server = Server("--memory", "--huge-pages", "--huge-pages=false", "--log-level", "info", env=env)
    try:
        assert tunables_of(server.proc.pid) is None
    finally:
        state = start_line_field(server, "huge_pages")
    assert state == ("kernel" if kernel_mode() == "always" else "off")


def test_a_process_started_with_privileges_serves_without_running_itself_again(tmp_path):
    # File capabilities start the binary in secure mode for a user who lacks them: the loader
    # then erases the tunable, so running again to ask for it would go on forever.
    if os.geteuid() != 0 or not shutil.which("setcap") or not shutil.which("setpriv"):
        pytest.skip("needs root, setcap and setpriv")
    if not kernel_gives_huge_pages():
        pytest.skip("the kernel's THP mode is not madvise: nothing would run again")
    folder = tempfile.mkdtemp()
    os.chmod(folder, 0o755)
    binary = os.path.join(folder, "foldtabled")
    shutil.copy(BIN, binary)
    os.chmod(binary, 0o755)
    subprocess.run(["setcap", "cap_net_bind_service+ep", binary], check=True)
    # Bounded (SIGKILL 2 s after SIGTERM, which the server blocks until it serves): a server that
    # kept running itself again would never print its URL.
    server = subprocess.Popen(
        ["timeout", "-k", "2", "20", "setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", binary,
         "--memory", "--port", "0", "--web-root", "", "--huge-pages", "--log-level", "info"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=without_tunables())
    try:
        line = server.stdout.readline()
        assert line.startswith("listening on http"), server.stderr.read()
    finally:
        server.terminate()
        server.wait(10)
    start = [l for l in server.stderr.read().splitlines() if " event=start " in l]
    assert len(start) == 1 and "huge_pages=unavailable" in start[0]
