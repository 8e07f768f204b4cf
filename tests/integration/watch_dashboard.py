"""Headless Chromium on vramd's dashboard: waits for the charts, checks the
figures shown for each GPU against /v1/status, the job started through
`vram run` and the firing alert; saves a screenshot.

usage: watch_dashboard.py http://127.0.0.1:PORT SCREENSHOT.png JOB_NAME RULE
"""
import http.client
import json
import os
import socket
import sys
import tempfile
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

base, shot, job_name, rule = sys.argv[1:5]


def api(path):
    with urllib.request.urlopen(base + path, timeout=10) as r:
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


opts = webdriver.ChromeOptions()
for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
          "--window-size=1400,1300", "--user-data-dir=" + tempfile.mkdtemp()):
    opts.add_argument(a)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
wait = WebDriverWait(driver, 60)
try:
    driver.get(base + "/")
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
    status = api("/v1/status")
    n = len(status["devices"])
    # dygraphs draws on canvases: every GPU's memory chart is up
    for i in range(n):
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-mem%d canvas" % i))
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-util%d canvas" % i))

    def figures_match(d):
        want = api("/v1/status")["devices"]
        for dev in want:
            i = dev["index"]
            for key, field in (("total", "total_bytes"), ("used", "used_bytes"),
                               ("reserved", "reserved_bytes"), ("free", "free_for_admission_bytes")):
                e = d.find_element(By.ID, "gpu%d-%s" % (i, key))
                if int(e.get_attribute("data-bytes")) != dev[field]:
                    return False
                if e.text != "%.2f GiB" % (dev[field] / 2**30):
                    return False
        return True

    wait.until(figures_match)
    print("ok - figures of %d GPUs equal /v1/status" % n)

    job = next(j for j in owner_api("/v1/jobs")["jobs"] if j["name"] == job_name)
    row = wait.until(lambda d: d.find_element(By.ID, "job%d" % job["id"]))
    wait.until(lambda d: job_name in row.text and "running" in row.text)
    # the job's memory appears in the stacked per-job chart of its GPU
    gpu = job["devices"][0]
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-jobs%d canvas" % gpu))
    print("ok - the job started through vram run is listed and charted")

    alert = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "li.alert[data-rule='%s']" % rule))
    assert "warning" in alert.text.lower(), alert.text
    count = driver.find_element(By.ID, "alert-count").text
    assert count == str(len(api("/v1/alerts")["firing"])), count
    print("ok - the firing alert is shown")
    hostile = [j for j in owner_api("/v1/jobs")["jobs"] if j["name"].startswith("<img")]
    if hostile:
        wait.until(lambda d: d.find_elements(By.ID, "job%d" % hostile[0]["id"]))
        assert not driver.find_elements(By.ID, "pwn"), "a job name was run as HTML"
        assert driver.title != "pwned"
        print("ok - a job name with HTML in it stays text")
    driver.save_screenshot(shot)
    print("ok - screenshot in " + shot)
finally:
    driver.quit()
