#!/usr/bin/env python3
"""The chat page at / in a real browser: headless Chromium driven by Selenium.

pi-launch --http with the split in three processes (the device's layers in a gpu worker,
--host-device; the cold neurons in a cpu worker) on the demo model stored with ffn_down_t.
The page loads (no CDN: nothing but the server is reached), finds the model, and — with
temperature 0 set in its settings — a message typed and sent streams a reply equal to the
non-streamed API's answer for the same conversation; the reply shows tokens/s and the share of
fired FFN neurons on the GPU worker and on the CPU. A second message continues the
conversation (chat mode, the model's template given as --chat-template chatml), and
completion mode continues the text; a reload keeps the conversation; the API key stays in
sessionStorage. On a server without a GPU worker: Stop ends a reply and frees the engine, New
conversation mid-reply cancels it (the typed text stays), the stats say nothing of a GPU, a
480 px window keeps the stats in view, code blocks and lists render as elements (markup in
the text stays text); with -c 48 a reply cut by the full context, and the next turn the
server refuses for its length, say so and offer a new
conversation. A screenshot is saved as a test artifact (web_page.png in the working
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
        try:
            value = predicate()
        except Exception as e:  # noqa: BLE001 (selenium's own type, imported late)
            # An element the page replaced while it was being read (a streamed reply
            # re-rendered): look again.
            if type(e).__name__ != "StaleElementReferenceException":
                raise
            value = None
        if value:
            return value
        time.sleep(0.1)
    return None


def running(address):
    return call(address, "GET", "/health")[2]["running"]


def controls(driver, By, bin_dir, tmp, say, text_of, set_value):
    """Stop, New conversation mid-reply, a full context, a narrow window and the
    rendering of code and lists, on a server without a GPU worker (no GPU share shown)."""
    p = launch(bin_dir, tmp, "-m", os.path.join(os.path.dirname(HERE), "models",
                                                  "demo-kjv-f16.gguf"),
               "-c", "65536", "--chat-template", "chatml", "--cpu-workers", "0")
    check(p.http is not None, "pi-launch --http without workers")
    driver.get(f"http://{p.http}/")
    wait_for(lambda: "demo-kjv-f16" in driver.find_element(By.ID, "model").text)
    check(not driver.find_elements(By.CSS_SELECTOR, ".msg"),
          "another server's page starts empty here (its own origin's storage)")
    # Replies long enough to be mid-stream when Stop is clicked on a fast machine too
    # (2000 tokens took 1.9 s on one), and to outlast the wait for the engine to be free
    # by far (60000 tokens: minutes at any speed), so only a cancelled request frees it.
    # The browser may lag the stream by seconds (it renders each piece), and the server
    # finds the abort at its next write: the wait is 30 s.
    set_value("max_tokens", 60000)

    def start(text):
        driver.find_element(By.ID, "prompt").send_keys(text)
        driver.find_element(By.ID, "send").click()
        return wait_for(lambda: any(e.get_attribute("data-raw") for e in driver.find_elements(
            By.CSS_SELECTOR, ".msg.assistant .text")), 30)

    # (A reply that ends on its own before Stop is clicked, on a loaded machine, is tried
    # again, at most three times.)
    for attempt in range(3):
        check(start("In the beginning God created"), "a long reply streams")
        showing = (driver.find_element(By.ID, "stop").is_displayed()
                   and not driver.find_element(By.ID, "send").is_displayed())
        driver.execute_script("document.getElementById('stop').click()")
        done = wait_for(lambda: driver.find_elements(By.CSS_SELECTOR,
                                                     ".msg.assistant[data-done='1']"))
        stats = done[-1].find_element(By.CSS_SELECTOR, ".stats").text if done else ""
        if stats == "stopped" or attempt == 2:
            break
        driver.find_element(By.ID, "clear").click()
    check(showing, "Stop replaces Send meanwhile")
    check(done and stats == "stopped" and text_of(done[-1]), f"Stop ends the reply ({stats!r})")
    check(wait_for(lambda: running(p.http) == 0, 30) is not None or running(p.http) == 0,
          "Stop frees the engine (the request is cancelled)")
    check(driver.find_element(By.ID, "send").is_displayed(), "Send is back after Stop")
    # New conversation while a reply streams: it is cancelled and forgotten.
    check(start("And the earth was without form"), "another long reply streams")
    streaming = driver.find_element(By.ID, "stop").is_displayed()
    driver.find_element(By.ID, "prompt").send_keys("typed meanwhile")
    driver.find_element(By.ID, "clear").click()
    check(streaming, "the reply was still streaming when New conversation was clicked")
    check(not driver.find_elements(By.CSS_SELECTOR, ".msg")
          and driver.find_element(By.ID, "send").is_displayed()
          and driver.find_element(By.ID, "prompt").get_attribute("value") == "typed meanwhile",
          "New conversation mid-reply: the log empties, Send is back, the typed text stays")
    check(wait_for(lambda: running(p.http) == 0, 30) is not None or running(p.http) == 0,
          "New conversation frees the engine")
    driver.find_element(By.ID, "prompt").clear()
    set_value("max_tokens", 24)
    set_value("temperature", 0)
    reply = say("In the beginning God created", 1)
    status, _, want = call(p.http, "POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "In the beginning God created"}],
        "max_tokens": 24, "temperature": 0, "top_k": 40, "top_p": 0.95, "min_p": 0.05,
        "repeat_penalty": 1})
    check(reply is not None and text_of(reply) == want["choices"][0]["message"]["content"],
          "the next message starts a conversation of its own (the API's answer to it alone)")
    line = reply.find_element(By.CSS_SELECTOR, ".stats").text if reply else ""
    check("tokens/s" in line and "GPU" not in line,
          f"without a GPU worker the stats say nothing of one ({line!r})")
    # A narrow window: the conversation keeps the width, the stats stay in view.
    driver.set_window_size(480, 800)
    stats = driver.find_elements(By.CSS_SELECTOR, ".stats")
    rect = stats[-1].rect if stats else {"x": 1e9, "width": 0}
    check(stats and stats[-1].is_displayed() and rect["x"] + rect["width"] <= 480,
          f"at 480 px wide the reply's stats are in view ({rect})")
    driver.set_window_size(1200, 800)
    # Code blocks and lists rendered as elements, the text never as HTML.
    html = driver.execute_script("return piRender(arguments[0]).innerHTML",
                                 "Run `make`:\n```\nx < y\n```\n- a\n- b\n1. c\n<img src=x>")
    check("<pre><code>x &lt; y</code></pre>" in html and "<ul><li>a</li><li>b</li></ul>" in html
          and "<ol><li>c</li></ol>" in html and "<code>make</code>" in html
          and "&lt;img src=x&gt;" in html and "<img" not in html,
          f"code blocks, inline code and lists rendered; markup stays text ({html!r})")
    check(p.stop() == 0, "pi-launch stops cleanly")
    # A context that fills: the reply says so and offers a new conversation.
    p = launch(bin_dir, tmp, "-m", os.path.join(os.path.dirname(HERE), "models",
                                                  "demo-kjv-f16.gguf"),
               "-c", "48", "--chat-template", "chatml", "--cpu-workers", "0")
    driver.get(f"http://{p.http}/")
    wait_for(lambda: "demo-kjv-f16" in driver.find_element(By.ID, "model").text)
    set_value("max_tokens", 200)
    reply = say("In the beginning God created", 1)
    notice = reply.find_elements(By.CSS_SELECTOR, ".notice") if reply else []
    check(notice and "context" in notice[0].text, "a reply cut by the full context says so")
    # The next turn does not fit: the server's refusal shows the same notice.
    refused = say("And God said", 2)
    notice = refused.find_elements(By.CSS_SELECTOR, ".notice") if refused else []
    check(notice and "context" in notice[0].text,
          "a turn the context cannot hold: the refusal says so too")
    if notice:
        notice[0].find_element(By.CSS_SELECTOR, "button").click()
    check(not driver.find_elements(By.CSS_SELECTOR, ".msg"), "its button starts a new conversation")
    check(p.stop() == 0, "pi-launch stops cleanly")


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
                """The reply's text as received (the page renders code and lists)."""
                return reply.find_element(By.CSS_SELECTOR, ".text").get_attribute("data-raw")

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
            # A reload keeps the conversation, and the next message continues it.
            driver.refresh()
            wait_for(lambda: "demo-down-t" in driver.find_element(By.ID, "model").text)
            kept = driver.find_elements(By.CSS_SELECTOR, ".msg")
            check(len(kept) == 6 and text_of(kept[1]) == a1,
                  f"a reload keeps the conversation ({len(kept)} messages)")
            # The key stays in the tab's session, never in localStorage.
            set_value("api_key", "not-a-real-key-0123456789")
            stored = driver.execute_script(
                "return [localStorage.getItem('pi.api_key'), sessionStorage.getItem('pi.api_key')]")
            check(stored == [None, "not-a-real-key-0123456789"],
                  f"the API key is kept in sessionStorage only ({stored})")
            set_value("api_key", "")
            shot = os.path.join(artifacts, "web_page.png")
            check(driver.save_screenshot(shot) and os.path.getsize(shot) > 0,
                  f"screenshot saved ({shot})")
            errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
            check(not errors, f"no errors in the browser's console ({errors[:2]})")
            check(p.stop() == 0, "pi-launch stops cleanly")
            controls(driver, By, bin_dir, tmp, say, text_of, set_value)
    finally:
        driver.quit()
    finish()


if __name__ == "__main__":
    main()
