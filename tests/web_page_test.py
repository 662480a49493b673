#!/usr/bin/env python3
"""The chat page at / in a real browser: headless Chromium driven by Selenium.

pi-launch --http with the split in three processes (the device's layers in a gpu worker,
--host-device; the cold neurons in a cpu worker) on the demo model stored with ffn_down_t.
The page loads (no CDN: nothing but the server is reached), finds the model, and — with
temperature 0 set in its settings — a message typed and sent streams a reply equal to the
non-streamed API's answer for the same conversation; the reply shows tokens/s and the share of
fired FFN neurons on the GPU worker and on the CPU. A second message continues the
conversation (chat mode, the model's template given as --chat-template chatml), and
completion mode continues the text. A screenshot is saved as a test artifact (web_page.png in the working
directory, or $PI_TEST_ARTIFACTS). Exit 77 (skipped, saying so) only where Chromium, its
driver or Selenium is not installed.

Usage: web_page_test.py BIN_DIR
"""

import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from served_process import check, demo_down_t, finish  # noqa: E402
from http_api_test import call, launch  # noqa: E402

def browser():
    """A headless Chromium under Selenium, or None (and why) where one cannot run."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None, "python3-selenium is not installed"
    chromium = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        return None, "chromium and chromium-driver are not installed"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1200,800", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=options), None


def wait_for(predicate, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    return None


def main():
    bin_dir = sys.argv[1]
    driver, why = browser()
    if driver is None:
        print(f"SKIP the browser test: {why} (scripts/install_deps.sh --tests installs them)")
        sys.exit(77)
    from selenium.webdriver.common.by import By
    artifacts = os.environ.get("PI_TEST_ARTIFACTS", os.getcwd())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            demo_t = demo_down_t(bin_dir, tmp, profile=True)
            p = launch(bin_dir, tmp, "-m", demo_t, "--sparse", "oracle", "--vram-budget", "8M",
                       "--host-device", "--cpu-workers", "1", "--chat-template", "chatml")
            check(p.http is not None, "pi-launch --http with a gpu worker and a cpu worker")
            settings = {"temperature": 0, "max_tokens": 24, "top_k": 40, "top_p": 0.95,
                        "min_p": 0.05, "repeat_penalty": 1}

            def api(path, **body):
                status, _, j = call(p.http, "POST", path, dict(settings, **body))
                return j if status == 200 else None

            def set_value(k, v):
                driver.execute_script(
                    "const e = document.getElementById(arguments[0]); e.value = arguments[1];"
                    "e.dispatchEvent(new Event('change'));", k, str(v))

            def say(text, n):
                """Types and sends `text`; the n-th reply's element once it is done."""
                driver.find_element(By.ID, "prompt").send_keys(text)
                driver.find_element(By.ID, "send").click()
                done = wait_for(lambda: len(driver.find_elements(
                    By.CSS_SELECTOR, ".msg.assistant[data-done='1']")) >= n)
                return driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")[n - 1] if done else None

            def text_of(reply):
                return reply.find_element(By.CSS_SELECTOR, ".text").get_attribute("textContent")

            driver.get(f"http://{p.http}/")
            check("pi" in driver.title, f"the page loads ({driver.title!r})")
            model = wait_for(lambda: "demo-down-t" in driver.find_element(By.ID, "model").text
                             and driver.find_element(By.ID, "model").text)
            check(model, f"the page found the model ({model!r})")
            check(driver.find_element(By.ID, "mode").get_attribute("value") == "chat",
                  "a model with a chat template: chat mode")
            for k, v in settings.items():
                set_value(k, v)
            first, second = "In the beginning God created", "And the earth"
            reply = say(first, 1)
            want = api("/v1/chat/completions", messages=[{"role": "user", "content": first}])
            a1 = want["choices"][0]["message"]["content"]
            check(reply is not None and text_of(reply) == a1,
                  f"the streamed chat reply equals the API's answer ({a1!r})")
            stats = reply.find_elements(By.CSS_SELECTOR, ".stats") if reply else []
            line = stats[0].text if stats else ""
            check("tokens/s" in line and "on the GPU worker" in line and "on the CPU" in line,
                  f"the reply shows its speed and where its neurons fired ({line!r})")
            reply = say(second, 2)
            want = api("/v1/chat/completions", messages=[
                {"role": "user", "content": first}, {"role": "assistant", "content": a1},
                {"role": "user", "content": second}])
            check(reply is not None and text_of(reply) == want["choices"][0]["message"]["content"],
                  "the second message continues the conversation (the API's answer to all three)")
            set_value("mode", "completion")
            reply = say(first, 3)
            want = api("/v1/completions", prompt=first)
            check(reply is not None and text_of(reply) == want["choices"][0]["text"],
                  f"completion mode: the API's completion ({want['choices'][0]['text']!r})")
            check(not driver.find_elements(By.CSS_SELECTOR, ".msg.error"), "no error replies")
            shot = os.path.join(artifacts, "web_page.png")
            check(driver.save_screenshot(shot) and os.path.getsize(shot) > 0,
                  f"screenshot saved ({shot})")
            errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
            check(not errors, f"no errors in the browser's console ({errors[:2]})")
            check(p.stop() == 0, "pi-launch stops cleanly")
    finally:
        driver.quit()
    finish()


if __name__ == "__main__":
    main()
