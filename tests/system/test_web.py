"""fluxes web in a real browser against a real instance.

``fluxes start --web PORT --require-auth`` (the Launcher with ``web_port``) runs the
web server as one of its supervised processes, bound to 127.0.0.1 on a free port;
Python playwright drives Debian's chromium (never a downloaded browser). Checked:
the pages render, live updates arrive after a submit, time travel shows a job
pending before it ran, a guest (and another user) cannot open another user's
job output, and the owner's drain button drains. Screenshots are saved under the
pytest temporary directory (the path is printed); docs/img's come from
scripts/web-screenshots.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fluxes.cli.main import main
from fluxes.formats import jobid as fjobid
from fluxes.proc.launcher import Launcher
from fluxes.store.security import ENV_CREDENTIALS, load_credentials, url_credentials
from tests.system.conftest import need_redis

pytestmark = pytest.mark.system

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
#: How long the browser waits for something the instance does (ms).
WAIT_MS = 15_000


def need_chromium() -> None:
    """Skip without chromium or playwright, except under CI where they must be there."""
    missing = None
    if not Path(CHROMIUM).exists():
        missing = f"{CHROMIUM} is not installed"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            missing = "the playwright package is not installed"
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{missing}, and CI is set")
        pytest.skip(missing)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Site:
    """The instance, where its web server listens, and who may log in."""

    launcher: Launcher
    url: str
    owner: str
    owner_password: str
    bob_password: str
    shots: Path

    def cli(self, *argv: str) -> int:
        """``fluxes ARGV`` as the instance owner."""
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(ENV_CREDENTIALS, str(self.launcher.credentials))
            return main(["--uri", str(self.launcher.uri), *argv])

    def submit(self, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
        capsys.readouterr()
        assert self.cli("submit", *argv) == 0
        return capsys.readouterr().out.strip()


def _wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url + "api/whoami", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    need_redis()
    need_chromium()
    port = free_port()
    base = Path(tempfile.mkdtemp(prefix="fluxes-web-", dir="/tmp"))
    shots = tmp_path_factory.mktemp("web-screenshots")
    print(f"\nfluxes web screenshots: {shots}")
    launcher = None
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(ENV_CREDENTIALS, "")
            mp.delenv("FLUXES_URI", raising=False)
            launcher = Launcher(state_dir=base / "state", nodes=2, cores_per_node=2,
                                require_auth=True, web_port=port,
                                config_text='[exec]\nkill-timeout = "2s"\n')
            launcher.start()
            assert launcher.credentials is not None
            mp.setenv(ENV_CREDENTIALS, str(launcher.credentials))
            assert main(["--uri", str(launcher.uri), "admin", "adduser", "bob", "--uid",
                         "5002", "--credentials-dir", str(base / "creds")]) == 0
        url = f"http://127.0.0.1:{port}/"
        _wait_http(url)
        owner_password = url_credentials(load_credentials(launcher.credentials).uri)[1]
        bob_password = url_credentials(load_credentials(base / "creds" / "bob.json").uri)[1]
        assert owner_password and bob_password
        import pwd

        owner = pwd.getpwuid(os.getuid()).pw_name
        yield Site(launcher, url, owner, owner_password, bob_password, shots)
    finally:
        if launcher is not None:
            launcher.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def browser(site: Site) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context (no cookies: a guest) and its page."""
    context = browser.new_context(viewport={"width": 1200, "height": 760})
    context.set_default_timeout(WAIT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


def shoot(site: Site, page: Any, name: str) -> None:
    """Save a screenshot as a test artifact."""
    page.screenshot(path=str(site.shots / f"web-{name}.png"), full_page=True)


def log_in(site: Site, page: Any, user: str, password: str) -> None:
    page.goto(site.url + "login")
    page.fill("#user", user)
    page.fill("#password", password)
    page.click("#login-button")
    page.wait_for_selector("#who")


def wait_until(check: Callable[[], bool], timeout: float = WAIT_MS / 1000) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


# ---------------------------------------------------------------- the tests


def test_pages_render(site: Site, page: Any, capsys: pytest.CaptureFixture[str]) -> None:
    jobid = site.submit(capsys, "-n2", "sleep", "30")
    site.submit(capsys, "--cc=1-3", "true")
    for path, title, name in (("", "Machine", "machine"), ("queues", "Queues", "queues"),
                              ("jobs?all=1", "Jobs", "jobs"), ("usage", "Usage", "usage")):
        page.goto(site.url + path)
        assert page.inner_text("main h1") == title
        if name == "jobs":
            page.wait_for_selector(f"#jobs >> text={jobid}")
        shoot(site, page, name)
    page.goto(site.url)
    page.wait_for_selector('#nodes .node[data-state="partly"], #nodes .node[data-state="allocated"]')
    page.goto(site.url + "gantt")
    page.wait_for_selector("#gantt rect.bar")
    shoot(site, page, "gantt")
    page.goto(site.url + "jobs/" + jobid)
    assert jobid in page.inner_text("main h1")
    # its live stream opens (the id in the path is percent-encoded: ƒ)
    page.wait_for_function("document.getElementById('live-status').dataset.state === 'open'",
                           timeout=5000)
    assert page.locator("#events li").count() >= 5
    shoot(site, page, "job")
    assert site.cli("cancel", jobid) == 0


def test_live_updates_arrive_after_a_submit(site: Site, page: Any,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    page.goto(site.url + "jobs")
    page.wait_for_function("document.getElementById('live-status').dataset.state === 'open'")
    jobid = site.submit(capsys, "sleep", "0.5")
    # pushed by the server (server-sent events), not reloaded by the test
    page.wait_for_selector(f"#jobs >> text={jobid}")
    assert jobid in page.inner_text("#live-status")


def test_time_travel_shows_a_job_pending_before_it_ran(
        site: Site, page: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert site.cli("queue", "stop", "-m", "web test") == 0
    jobid = site.submit(capsys, "true")
    assert site.cli("job", "wait-event", "-t", "30s", jobid, "priority") == 0  # now SCHED
    pending_at = time.time()
    assert site.cli("queue", "start") == 0
    assert site.cli("job", "wait", jobid) == 0
    page.goto(site.url + f"jobs/{jobid}")
    assert "COMPLETED" in page.inner_text("#facts")
    page.goto(site.url + f"jobs/{jobid}?at={pending_at}")
    assert "SCHED" in page.inner_text("#facts")
    assert "as of" in page.inner_text("#when")
    assert page.locator("#events li.future").count() > 0  # what came later, greyed
    shoot(site, page, "time-travel")
    page.goto(site.url + f"jobs?all=1&at={pending_at}")
    row = page.locator(f"#jobs tr:has-text('{jobid}')")
    assert row.locator(".st").inner_text() == "S"
    # play: step on event by event until the job has run
    page.goto(site.url + f"jobs/{jobid}?at={pending_at}")
    for _ in range(40):
        page.click("#step-next")
        page.wait_for_function(f"document.body.dataset.at !== '{pending_at!r}'")
        if "COMPLETED" in page.inner_text("#facts"):
            break
        pending_at = float(page.evaluate("document.body.dataset.at"))
    assert "COMPLETED" in page.inner_text("#facts")


def test_a_guest_cannot_open_another_users_output(site: Site, page: Any,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    secret = "web-secret-4711"
    jobid = site.submit(capsys, "sh", "-c", f"echo {secret}")
    assert site.cli("job", "wait", jobid) == 0
    number = fjobid.parse(jobid)
    for who in ("guest", "bob"):
        if who == "bob":
            log_in(site, page, "bob", site.bob_password)
        page.goto(site.url + f"jobs/{jobid}")
        assert "private" in page.inner_text("#output"), who
        assert "private" in page.inner_text("#jobspec"), who
        assert secret not in page.content(), who
        doc = page.request.get(site.url + f"api/jobs/{number}").json()
        assert doc["output"]["private"] and secret not in str(doc), who
    shoot(site, page, "private")
    log_in(site, page, site.owner, site.owner_password)
    page.goto(site.url + f"jobs/{jobid}")
    assert secret in page.inner_text("#output")  # there was something to hide


def test_the_owners_drain_button_drains(site: Site, page: Any,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    log_in(site, page, site.owner, site.owner_password)
    page.goto(site.url)
    page.fill("#drain-targets", "node1")
    page.fill("#drain-reason", "web test")
    page.click("#drain-button")
    assert "sent" in page.inner_text("#flash")

    def drained() -> bool:
        page.goto(site.url)
        return page.get_attribute('#nodes .node[data-rank="1"]', "data-state") == "drained"

    wait_until(drained)
    assert "web test" in page.inner_text("#drained")
    shoot(site, page, "drained")
    capsys.readouterr()
    assert site.cli("resource", "status") == 0
    assert "web test" in capsys.readouterr().out
    page.click("#undrain-1")
    wait_until(lambda: not drained())
    # and the owner cancels a job from its page
    jobid = site.submit(capsys, "sleep", "60")
    page.goto(site.url + f"jobs/{jobid}")
    page.click("#cancel-button")
    assert "cancel sent" in page.inner_text("#flash")
    assert site.cli("job", "wait", jobid) == 1  # it ends, not completed
    page.goto(site.url + f"jobs/{jobid}")
    assert "CANCELED" in page.inner_text("#facts")
