"""Forecasts on the web (issue 28), in a real browser: a pending job's page says when it
is expected to start and behind which job, ``/api/jobs?forecast=1`` carries
``t_forecast``, and the Gantt chart draws the forecast future in a lighter shade."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest

from tests.system import test_web as web
from tests.system.test_web import Site, log_in, shoot, wait_until

pytestmark = pytest.mark.system

# test_web's fixtures: an instance behind fluxes web (its own, for this module), the browser
site = web.site
browser = web.browser
page = web.page


def _api(site: Site, page: Any, path: str) -> Any:
    """A JSON API answer, as the logged-in browser gets it."""
    response = page.request.get(site.url + path)
    assert response.status == 200, response.text()
    return json.loads(response.text())


def test_pending_job_page_and_gantt_show_the_forecast(
        site: Site, page: Any, capsys: pytest.CaptureFixture[str]) -> None:
    big = site.submit(capsys, "-N2", "--exclusive", "-t", "120s", "sleep", "600")
    waiting = site.submit(capsys, "-N2", "--exclusive", "-t", "30s", "--job-name=after",
                          "true")
    try:
        log_in(site, page, site.owner, site.owner_password)

        def states() -> dict[str, Any]:
            doc = _api(site, page, "api/jobs?forecast=1")
            return {j["f58"]: j for j in doc["jobs"]}

        wait_until(lambda: states().get(big, {}).get("state") == "RUN"
                   and states().get(waiting, {}).get("state") == "SCHED")
        rows = states()
        t_limit = rows[big]["t_run"] + 120
        assert abs(rows[waiting]["t_forecast"] - t_limit) <= 2
        assert "t_forecast" not in rows[big]
        # the job's page: expected start, where, behind which job
        page.goto(site.url + "jobs/" + waiting)
        text = page.inner_text("#forecast")
        assert "expected start:" in text and big in text, text
        assert page.locator(f'#forecast a[href*="{big}"]').count() == 1
        shoot(site, page, "forecast-job")
        # the Gantt chart: the forecast future lighter than the past
        page.goto(site.url + "gantt?forecast=1")
        page.wait_for_selector("#gantt-now", state="attached")
        lighter = page.locator("rect.bar.forecast")
        assert lighter.count() >= 4  # the running job's rest and the waiting job, 2 nodes each
        opacity = page.eval_on_selector("rect.bar.forecast",
                                        "e => getComputedStyle(e).opacity")
        solid = page.eval_on_selector("rect.bar:not(.forecast)",
                                      "e => getComputedStyle(e).opacity")
        assert float(opacity) < float(solid) == 1.0
        assert page.is_checked("#gantt-forecast")
        shoot(site, page, "forecast-gantt")
        # without the flag: no forecast bars, no future
        page.goto(site.url + "gantt")
        assert page.locator("rect.bar.forecast").count() == 0
        # another user sees the same forecast of the owner's jobs (read with bob's rights)
        page.context.clear_cookies()
        log_in(site, page, "bob", site.bob_password)
        rows = {j["f58"]: j for j in _api(site, page, "api/jobs?forecast=1")["jobs"]}
        assert abs(rows[waiting]["t_forecast"] - t_limit) <= 2
        page.goto(site.url + "jobs/" + waiting)
        assert "expected start:" in page.inner_text("#forecast")
    finally:
        for jobid in (big, waiting):
            site.cli("cancel", jobid)
        capsys.readouterr()


def test_api_jobs_without_the_flag_has_no_forecast(site: Site) -> None:
    # the flag is what costs a forecast: a plain listing never runs one
    request = urllib.request.Request(site.url + "api/jobs")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            doc = json.loads(response.read())
    except urllib.error.HTTPError as exc:  # a guest may be refused: nothing to check
        assert exc.code in (401, 403)
        return
    assert all("t_forecast" not in j for j in doc["jobs"])
    time.sleep(0)
