"""The dashboard in a real headless Chromium (Debian's chromium and chromium-driver, driven by
selenium) against the admin API on the sandbox with the operator running the example MIG job
and the example job that cannot fit:

- the page loads from the API server itself (assets shipped in the package), asks for a token;
- a forged token is refused with the API's reason; a ServiceAccount token signs in;
- the map shows every sandbox node, the MIG slice the example MIG job holds (at its profile),
  and the jobs table shows the waiting job's reason code and message;
- a screenshot is saved as an artifact (its path is printed).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from admin_helpers import (
    READER_RULES,
    AdminApi,
    accounts,
    mig_configs,
    restore_mig_configs,
    wait_settled,
)
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, OperatorProcess, wait_for

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--ignore-certificate-errors",  # the API's certificate is self-signed
    "--window-size=1600,1400",
)


def chromium() -> webdriver.Chrome:
    """Debian's chromium through Debian's chromedriver; fails with the reason if missing."""
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if binary is None or driver is None:
        pytest.fail(
            "chromium and chromium-driver are needed: apt-get install chromium chromium-driver",
            pytrace=False,
        )
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(driver), options=options)


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


def _example(name: str) -> dict[str, object]:
    doc: dict[str, object] = yaml.safe_load((EXAMPLES / name).read_text())
    return doc


def test_dashboard_signs_in_and_shows_nodes_mig_slice_and_reason(
    sandbox: Sandbox,
    kube: Kube,
    ns: str,
    operator: OperatorProcess,
    browser: webdriver.Chrome,
    tmp_path: Path,
) -> None:
    layouts = mig_configs(kube)
    kube.create_job(ns, _example("trainingjob-mig-slice.yaml"))
    kube.create_job(ns, _example("trainingjob-unschedulable.yaml"))
    wait_for(lambda: kube.phase(ns, "bert-mig") == "Running", "bert-mig Running", 90)
    with accounts(kube, ns) as made, AdminApi(sandbox, tmp_path / "admin") as api:
        token = made.create("dashboard", READER_RULES)
        wait_settled(1.0)
        wait = WebDriverWait(browser, 60)
        browser.get(api.url + "/")
        wait.until(ec.visibility_of_element_located((By.ID, "token")))

        browser.find_element(By.ID, "token").send_keys("forged-" + uuid.uuid4().hex)
        browser.find_element(By.ID, "signin-button").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "signin-error"), "401"))

        browser.find_element(By.ID, "token").send_keys(token)
        browser.find_element(By.ID, "signin-button").click()
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-rendered"))

        nodes = {
            e.get_attribute("data-node")
            for e in browser.find_elements(By.CSS_SELECTOR, "#fleet .node")
        }
        expected = {n["metadata"]["name"] for n in kube.core.list_node().to_dict()["items"]}
        assert nodes == expected and len(nodes) == 16

        mig_slice = wait.until(
            lambda d: d.find_elements(By.CSS_SELECTOR, f'.slice[data-job="{ns}/bert-mig"]')
        )[0]
        assert mig_slice.get_attribute("data-profile") == "3g.40gb"
        assert "bert-mig" in (mig_slice.get_attribute("title") or "")

        row = wait.until(
            lambda d: d.find_elements(
                By.CSS_SELECTOR, f'#jobs tr[data-job="{ns}/TrainingJob/too-big"]'
            )
        )[0]
        reason = row.find_element(By.CSS_SELECTOR, ".reason").text
        assert reason.startswith("ReplicaExceedsNode:"), reason
        assert "largest node has 8 GPUs" in reason

        shot = tmp_path / "dashboard.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        print(f"dashboard screenshot: {shot}")
    restore_mig_configs(kube, ns, layouts)  # the example MIG job repartitioned a GPU
