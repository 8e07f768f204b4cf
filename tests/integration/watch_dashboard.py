"""Headless Chromium on vramd's dashboard, kept open while jobs start and end.

Checks: without the token the page asks for it and shows no data (a wrong
one is asked again); the form and the address's fragment (#token=) open it;
the figures of each GPU equal /v1/status (null for the failed GPU is
shown as "–"); the job started through `vram run` is listed and charted; the
firing alert is shown; a job name with HTML in it stays text and is escaped
once; then, for VRAM_DASHBOARD_SOAK_S seconds (default 300), jobs start and end
on GPUs 0 and 1 while the page stays open: after each change the legends of
the "memory by job" charts name every running job of their GPU, each chart has
as many labels as columns, its time axis is the current one, and the browser's
console stays clean. Then screenshots at a desktop and a phone width (the
phone's page is no wider than the phone), and vramd is stopped: the page says
so instead of showing old figures as current.

usage: watch_dashboard.py http://127.0.0.1:PORT OUT_DIR JOB_NAME RULE VRAMD_PID
environment: VRAM_BIN (the CLI), VRAM_SOCKET, VRAM_TOKEN (vramd's), VRAM_DASHBOARD_SOAK_S
"""
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.support.ui import WebDriverWait

base, out_dir, job_name, rule, vramd_pid = sys.argv[1:6]
VRAM = os.environ["VRAM_BIN"]
SOAK_S = float(os.environ.get("VRAM_DASHBOARD_SOAK_S", "300"))


TOKEN = os.environ["VRAM_TOKEN"]


def api(path):
    req = urllib.request.Request(base + path, headers={"Authorization": "Bearer " + TOKEN})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=10)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(10)
        self.sock.connect(self.unix_path)


def owner_api(path):
    """The job list is not for anonymous TCP readers (docs/daemon.md): the
    test reads it as the jobs' owner over vramd's Unix socket."""
    c = UnixConnection(os.environ["VRAM_SOCKET"])
    c.request("GET", path)
    return json.load(c.getresponse())


def gib_text(b):
    return "–" if b is None else "%.2f GiB" % (b / 2**30)


opts = webdriver.ChromeOptions()
for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
          "--window-size=1400,1000", "--user-data-dir=" + tempfile.mkdtemp()):
    opts.add_argument(a)
opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
# A state polled through vramd's API may meet a busy moment on a loaded
# machine (a reset connection, an error body): the poll asks again until
# its 60 s bound, and a real failure still ends in a timeout that names it.
wait = WebDriverWait(driver, 60, ignored_exceptions=(
    OSError, KeyError, http.client.HTTPException, json.JSONDecodeError,
    StaleElementReferenceException))
console = []  # every console entry the page wrote


def console_clean():
    console.extend(driver.get_log("browser"))
    bad = [e for e in console if e["level"] in ("SEVERE", "WARNING")]
    assert not bad, "console: %s" % bad


def refreshes():
    return int(driver.find_element(By.TAG_NAME, "body").get_attribute("data-refreshes") or 0)


def next_refresh():
    """Waits until the page has completed one more refresh than now."""
    n = refreshes()
    wait.until(lambda d: refreshes() > n)


def viewport(width, height):
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1,
                            "mobile": width < 600})
    next_refresh()


jobs_started = []  # Popen of each `vram run`


def start_job(device, name, seconds):
    p = subprocess.Popen([VRAM, "run", "--mem", "2GiB", "--devices", str(device), "--name", name,
                          "--", VRAM, "sim", "alloc", "--mem", "1GiB", "--seconds", "%.1f" % seconds],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    jobs_started.append(p)
    return p


def running_by_device():
    out = {}
    for j in owner_api("/v1/jobs")["jobs"]:
        if j["state"] == "running":
            for dev in j["devices"]:
                out.setdefault(dev, []).append(j)
    return out


def legends_name_running_jobs(d):
    """True once every running job's GPU legend names it ("job ID NAME")."""
    for dev, jobs in running_by_device().items():
        legend = d.find_elements(By.ID, "legend-jobs%d" % dev)
        if not legend:
            return False
        text = legend[0].text
        if any(("job %d %s" % (j["id"], j["name"])) not in text for j in jobs):
            return False
    return True


CHART_STATE = """
const out = [];
for (const id in charts) {
  const g = charts[id];
  out.push([id, g.numColumns(), g.getLabels().length, g.xAxisRange()[1]]);
}
return out;"""


def charts_consistent():
    now_ms = time.time() * 1000
    for cid, ncols, nlabels, x_end in driver.execute_script(CHART_STATE):
        assert ncols == nlabels, "%s: %d columns, %d labels" % (cid, ncols, nlabels)
        # the axis ends near now, never at 1970 (the symptom of a labels mismatch)
        assert abs(x_end - now_ms) < 600e3, "%s: axis ends at %s" % (cid, x_end)


def ready(d):
    return d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1"


try:
    # without the token the page asks for it and shows no data
    driver.get(base + "/")
    form = wait.until(lambda d: d.find_element(By.ID, "login") if
                      d.find_element(By.ID, "login").is_displayed() else None)
    assert "token" in form.text.lower(), form.text
    assert not ready(driver) and not driver.find_elements(By.CSS_SELECTOR, ".gpu"), \
        "data shown without the token"
    assert "missing token" in driver.find_element(By.ID, "login-why").text
    driver.find_element(By.ID, "token").send_keys("not-" + TOKEN)
    form.find_element(By.TAG_NAME, "button").click()
    wait.until(lambda d: d.find_element(By.ID, "login").is_displayed() and
               "wrong token" in d.find_element(By.ID, "login-why").text)
    assert not ready(driver), "data shown with a wrong token"
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    form.find_element(By.TAG_NAME, "button").click()
    wait.until(ready)
    assert not driver.find_element(By.ID, "login").is_displayed()
    print("ok - without the token the page asks for it and shows nothing; a wrong one is "
          "asked again; with the token the data comes")
    # the token in the address's fragment, taken off the address once read
    driver.execute_script("sessionStorage.clear()")
    driver.get("about:blank")
    driver.get(base + "/#token=" + TOKEN)
    wait.until(ready)
    assert driver.execute_script("return sessionStorage.getItem('vramd-token')") == TOKEN
    assert "token" not in driver.current_url, driver.current_url
    print("ok - the token in the fragment (#token=) opens the data; the address keeps no token")
    # what the browser logged so far: the refused requests (401), nothing else
    other = [e for e in driver.get_log("browser") if "status of 401" not in e["message"]]
    assert not other, "console before the token: %s" % other
    status = api("/v1/status")
    n = len(status["devices"])
    for i in range(n):
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-mem%d canvas" % i))
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-util%d canvas" % i))

    def figures_match(d):
        for dev in api("/v1/status")["devices"]:
            i = dev["index"]
            for key, field in (("total", "total_bytes"), ("used", "used_bytes"),
                               ("reserved", "reserved_bytes"), ("free", "free_for_admission_bytes")):
                e = d.find_element(By.ID, "gpu%d-%s" % (i, key))
                want = dev[field]
                if e.get_attribute("data-value") != ("" if want is None else str(want)):
                    return False
                if e.text != gib_text(want):
                    return False
        return True

    wait.until(figures_match)
    print("ok - figures of %d GPUs equal /v1/status" % n)

    down = [d for d in status["devices"] if not d["available"]]
    for dev in down:
        assert dev["total_bytes"] is None and dev["free_for_admission_bytes"] is None, dev
        h3 = driver.find_element(By.CSS_SELECTOR, "#gpu%d h3" % dev["index"]).text
        assert "unavailable" in h3 and "0.00" not in h3, h3
    if down:
        print("ok - a failed GPU has null figures, shown as unavailable with no number")

    job = next(j for j in owner_api("/v1/jobs")["jobs"] if j["name"] == job_name)
    row = wait.until(lambda d: d.find_element(By.ID, "job%d" % job["id"]))
    wait.until(lambda d: job_name in row.text and "running" in row.text)
    gpu = job["devices"][0]
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-jobs%d canvas" % gpu))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#procs tr.proc"))
    print("ok - the job started through vram run is listed, charted, its process shown")

    alert = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "li.alert[data-rule='%s']" % rule))
    assert "warning" in alert.text.lower(), alert.text
    assert driver.find_element(By.ID, "alert-count").text == str(len(api("/v1/alerts")["firing"]))
    print("ok - the firing alert is shown")

    hostile = [j for j in owner_api("/v1/jobs")["jobs"] if j["name"].startswith("<img")]
    if hostile:
        h = hostile[0]
        wait.until(lambda d: d.find_elements(By.ID, "job%d" % h["id"]))
        wait.until(lambda d: h["name"] in d.find_element(By.ID, "legend-jobs%d" % h["devices"][0]).text)
        assert not driver.find_elements(By.ID, "pwn"), "a job name was run as HTML"
        assert driver.title != "pwned"
        assert "&#" not in driver.find_element(By.ID, "gpus").text, "a label was escaped twice"
        print("ok - a job name with HTML in it stays text, escaped once in the legend")

    # ---- the page stays open while jobs start and end on both GPUs ----
    deadline = time.monotonic() + SOAK_S
    live = {0: [], 1: []}
    changes = checks = 0
    seq = 0
    while time.monotonic() < deadline or checks < 3:
        for dev in live:
            live[dev] = [p for p in live[dev] if p.poll() is None]
            changes += 2 - len(live[dev])
            while len(live[dev]) < 2:
                seq += 1
                live[dev].append(start_job(dev, "soak-%d" % seq, random.uniform(2, 8)))
        next_refresh()
        wait.until(legends_name_running_jobs)
        charts_consistent()
        console_clean()
        checks += 1
    print("ok - %.0f s open, %d jobs started and ended, %d checks: legends name the running jobs, "
          "labels match columns, no console error" % (SOAK_S, seq, checks))

    # ---- screenshots at a desktop and a phone width ----
    viewport(1400, 1000)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    viewport(1400, min(height, 3000))
    driver.save_screenshot(os.path.join(out_dir, "dashboard.png"))
    viewport(390, 844)
    width = driver.execute_script("return document.documentElement.scrollWidth")
    assert width <= 390, "the page is %d px wide on a 390 px phone" % width
    height = driver.execute_script("return document.documentElement.scrollHeight")
    viewport(390, min(height, 4000))
    driver.save_screenshot(os.path.join(out_dir, "dashboard-phone.png"))
    console_clean()
    print("ok - no horizontal scrolling at 390 px; screenshots in %s" % out_dir)

    # ---- vramd goes away: the page says so ----
    os.kill(int(vramd_pid), signal.SIGTERM)
    wait.until(lambda d: d.find_element(By.ID, "offline").is_displayed())
    text = driver.find_element(By.ID, "offline").text
    assert "not answering" in text and "not current" in text, text
    assert "offline" in driver.find_element(By.TAG_NAME, "body").get_attribute("class")
    print("ok - with vramd down the page says its figures are not current")
finally:
    for p in jobs_started:
        if p.poll() is None:
            p.terminate()
    for p in jobs_started:
        p.wait()
    driver.quit()
