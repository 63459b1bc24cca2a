"""`corral view` in a real headless chromium, on the records of a real tiny GRPO run: click from
the run to a step, a group and an episode, and check the numbers against the records."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("trl")
    pytest.importorskip("selenium")
    if shutil.which("chromium") is None or shutil.which("chromedriver") is None:
        pytest.skip("needs Debian's chromium and chromium-driver: run .ci/setup-machine", allow_module_level=True)

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from corral.protocol.record_store import EpisodeStore
from corral.protocol.records import EpisodeRecord, RolloutRecord
from tests.servers import corral_command, free_port

pytestmark = [pytest.mark.trl]
SUCCESS = 0.2  # gridsim's idle day: the tiny model reaches it, so pass rates are not all zero


@pytest.fixture(scope="module")
def viewer(grpo_run) -> Iterator[str]:
    with serving(grpo_run.records) as url:
        yield url


@contextmanager
def serving(records: Path, *options: str, token: str | None = None) -> Iterator[str]:
    """`corral view records [options]` on a free loopback port, until the block ends (`token`:
    the one it was given, sent while waiting for it to answer)."""
    port = free_port()
    command, environ = corral_command("view", str(records), "--port", str(port), "--success", str(SUCCESS), *options)
    server = subprocess.Popen(command, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                if httpx.get(url, headers=headers, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            raise AssertionError(
                f"corral view never answered: {server.stderr.read1().decode() if server.stderr else ''}"
            )
        yield url
    finally:
        server.terminate()
        server.wait(30)


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver") or "chromedriver"))
    yield driver
    driver.quit()


def _records(grpo_run) -> list[tuple[RolloutRecord, EpisodeRecord]]:
    with EpisodeStore(grpo_run.records) as store:
        rollouts = [store.read(row) for row in store.find(kind="rollouts", run=grpo_run.run)]
        return [(r, store.episode(r.episode_id)) for r in rollouts]  # type: ignore[misc]


def _no_console_errors(browser: webdriver.Chrome) -> None:
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def _cells(browser: webdriver.Chrome, css: str) -> list[str]:
    return [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, css)]


def test_clicking_from_the_run_to_an_episode_shows_the_records_numbers(grpo_run, viewer, browser, tmp_path) -> None:
    records = _records(grpo_run)
    browser.get(viewer)
    browser.find_element(By.LINK_TEXT, grpo_run.run).click()
    _no_console_errors(browser)
    # Each step's mean reward and pass@1 as computed from the records.
    by_step: dict[int, list[RolloutRecord]] = defaultdict(list)
    for rollout, episode in records:
        by_step[rollout.step].append(rollout.model_copy(update={"reward": episode.reward}))
    expected_means, expected_passes = [], []
    for step in sorted(by_step):
        scored = [r for r in by_step[step] if r.reward is not None]
        expected_means.append(f"{sum(r.reward for r in scored) / len(scored):.3f}")
        tasks = {r.task_id for r in scored}
        rates = [
            sum(r.reward >= SUCCESS for r in scored if r.task_id == t) / sum(r.task_id == t for r in scored)
            for t in tasks
        ]
        expected_passes.append(f"{sum(rates) / len(rates):.3f}")
    assert _cells(browser, "#steps td.mean-reward") == expected_means
    assert _cells(browser, "#steps td.pass-at-1") == expected_passes
    assert browser.find_element(By.ID, "episode-count").text == str(len(records))
    shot = Path(os.environ.get("CORRAL_SCREENSHOTS", tmp_path))
    browser.save_screenshot(str(shot / "viewer-run.png"))

    # A step: its groups, each member's reward from the records.
    browser.find_element(By.CSS_SELECTOR, "a.step").click()
    _no_console_errors(browser)
    step0 = sorted((r for r, _ in records if r.step == 0), key=lambda r: (r.group, r.group_index))
    episodes = {e.episode_id: e for _, e in records}
    groups: dict[int, list[str]] = defaultdict(list)
    for r in step0:
        reward = episodes[r.episode_id].reward
        groups[r.group].append("-" if reward is None else f"{reward:.3f}")
    assert _cells(browser, "#groups td.rewards") == [", ".join(groups[g]) for g in sorted(groups)]

    # A group, then its first member's episode: its reward and sampled ids are the records'.
    browser.find_element(By.CSS_SELECTOR, "#groups tr.group a").click()
    _no_console_errors(browser)
    assert (
        "message" in browser.find_element(By.ID, "difference").text
        or "identical" in browser.find_element(By.ID, "difference").text
    )
    browser.find_element(By.LINK_TEXT, "member 0").click()
    _no_console_errors(browser)
    first = step0[0]
    reward = episodes[first.episode_id].reward
    assert browser.find_element(By.ID, "reward").text == ("-" if reward is None else f"{reward:.3f}")
    assert browser.find_element(By.ID, "sampled").text == str(sum(first.env_mask))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#calls tr.call")) == len(episodes[first.episode_id].calls)
    browser.execute_script("document.getElementById('calls').scrollIntoView()")
    browser.save_screenshot(str(shot / "viewer-episode.png"))

    # An episode the env answered: its ids split into sampled (logprob on hover) and the env's.
    answered = next(r for r, _ in records if 0 in r.env_mask)
    browser.get(f"{viewer}/episodes/{answered.episode_id}")
    assert browser.find_element(By.ID, "sampled").text == str(sum(answered.env_mask))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tokens .tok.sampled")) == sum(answered.env_mask)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tokens .tok.env")) == answered.env_mask.count(0)
    _no_console_errors(browser)


def test_a_task_filter_narrows_the_episodes_and_stays_in_the_link(grpo_run, viewer, browser) -> None:
    records = _records(grpo_run)
    task = records[0][0].task_id
    browser.get(f"{viewer}/runs/{grpo_run.run}")
    field = browser.find_element(By.CSS_SELECTOR, "form.filters input[name=task]")
    field.send_keys(task)
    field.submit()
    expected = sum(r.task_id == task for r, _ in records)
    assert 0 < expected < len(records)
    assert browser.find_element(By.ID, "episode-count").text == str(expected)
    assert f"task={task}" in browser.current_url
    assert set(_cells(browser, "#episodes tr.episode td:nth-child(2)")) == {task}
    _no_console_errors(browser)
    # The filter, downloaded as RL prompts: the one prompt of that task.
    link = next(
        a.get_attribute("href")
        for a in browser.find_elements(By.CSS_SELECTOR, "a.export")
        if "kind=prompts" in a.get_attribute("href")
    )
    rows = [json.loads(line) for line in httpx.get(link, trust_env=False).text.splitlines()]
    assert [(row["task_id"], row["prompt"]) for row in rows] == [
        (task, [{"role": "user", "content": f"Submit a schedule for {task}."}])
    ]


def test_a_run_page_shows_new_episodes_while_the_trainer_writes_without_a_reload(grpo_run, browser, tmp_path) -> None:
    records = tmp_path / "records"
    shutil.copytree(grpo_run.records, records)
    with serving(records) as url:
        browser.get(f"{url}/runs/{grpo_run.run}")
        before = int(browser.find_element(By.ID, "episode-count").text)
        browser.execute_script("window.loadedOnce = true")  # a reload would drop it
        heading = browser.find_element(By.CSS_SELECTOR, "#steps th")
        heading.click()
        heading.click()  # the steps by number, descending
        browser.execute_script("window.scrollTo(0, 400)")
        rollouts = next((records / grpo_run.run).glob("rollouts-*.jsonl"))
        last = RolloutRecord.model_validate_json(rollouts.read_text().splitlines()[-1])
        late = last.model_copy(update={"episode_id": "late", "step": last.step + 1, "group": 0, "group_index": 0})
        with open(rollouts, "a") as file:  # the trainer's next step, written while the page is open
            file.write(late.model_dump_json() + "\n")
        # The page polls every 3 s; a minute is far beyond that, and never reached when it works.
        WebDriverWait(browser, 60, ignored_exceptions=(StaleElementReferenceException,)).until(
            lambda b: b.find_element(By.ID, "episode-count").text == str(before + 1)
        )
        WebDriverWait(browser, 10).until(lambda b: "late" in b.find_element(By.ID, "episodes").text)
        assert browser.execute_script("return window.loadedOnce") is True
        assert _cells(browser, "#steps a.step")[0] == str(last.step + 1)  # swapped in, sorted as it was
        assert browser.find_element(By.CSS_SELECTOR, "#steps th").get_attribute("data-dir") == "desc"
        assert browser.execute_script("return window.scrollY") == 400
        _no_console_errors(browser)


def test_with_a_tokenizer_each_chip_shows_its_tokens_text(grpo_run, browser, tmp_path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(grpo_run.model)
    answered = next(r for r, _ in _records(grpo_run) if 0 in r.env_mask)
    browser.get("about:blank")
    browser.get_log("browser")  # dropped: an earlier test's page polling the server that test stopped
    with serving(grpo_run.records, "--tokenizer", str(grpo_run.model)) as url:
        browser.get(f"{url}/episodes/{answered.episode_id}")
        chips = browser.find_elements(By.CSS_SELECTOR, "#tokens .tok")
        shown = [chip.text for chip in chips]
        prompt_chips = browser.find_elements(By.CSS_SELECTOR, "#prompt-tokens .tok")
        prompt_titles = [chip.get_attribute("title") for chip in prompt_chips]
        titles = [chip.get_attribute("title") for chip in chips]
        shot = Path(os.environ.get("CORRAL_SCREENSHOTS", tmp_path))
        browser.execute_script("document.getElementById('tokens').scrollIntoView()")
        browser.save_screenshot(str(shot / "viewer-tokens.png"))
        _no_console_errors(browser)
    marks = {" ": "\u00b7", "\n": "\u21b5", "\t": "\u21e5", "\r": "\u240d"}  # how the page shows whitespace
    decoded = [tokenizer.decode([i], clean_up_tokenization_spaces=False) for i in answered.completion_ids]
    assert any(" " in text or "\n" in text for text in decoded)  # the marks are exercised
    # other control characters (the tiny model samples some) as their code
    assert shown == [
        "".join(marks.get(c, c if c.isprintable() else f"\\u{ord(c):04x}") for c in text) or "\u2205"
        for text in decoded
    ]
    assert prompt_titles == [f"id {i} · prompt" for i in answered.prompt_ids] and answered.prompt_ids
    assert titles == [
        f"id {i} · logprob {lp:.3f}" if m else f"id {i} · env token"
        for i, m, lp in zip(answered.completion_ids, answered.env_mask, answered.logprobs, strict=True)
    ]


def _shown(browser: webdriver.Chrome, css: str) -> list[str]:
    return [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, css) if cell.is_displayed()]


def test_a_search_box_keeps_the_rows_that_hold_a_task_id_and_the_tasks_table_sorts_by_pass_rate(
    grpo_run, viewer, browser
) -> None:
    records = _records(grpo_run)
    by_task: dict[str, list[float]] = defaultdict(list)
    for rollout, episode in records:
        if episode.reward is not None:
            by_task[rollout.task_id].append(episode.reward)
    rates = {task: sum(r >= SUCCESS for r in rewards) / len(rewards) for task, rewards in by_task.items()}
    browser.get(f"{viewer}/runs/{grpo_run.run}")
    # The tasks table: each task's pass rate over the run, from the records; sorted by it on a click.
    browser.find_element(By.XPATH, "//table[@id='tasks']//th[text()='pass rate']").click()
    ordered = sorted(sorted(rates), key=lambda task: rates[task])  # ties by name: the table's first order
    assert _cells(browser, "#tasks tr td:nth-child(1)") == ordered
    assert _cells(browser, "#tasks tr td:nth-child(4)") == [f"{rates[task]:.3f}" for task in ordered]
    browser.find_element(By.XPATH, "//table[@id='tasks']//th[text()='pass rate']").click()
    assert _cells(browser, "#tasks tr td:nth-child(1)") == sorted(sorted(rates), key=lambda task: -rates[task])

    # A task id in the search boxes: its rows alone stay, in the tasks and the episodes tables.
    task = ordered[-1]
    browser.find_element(By.CSS_SELECTOR, "input.search[data-table=tasks]").send_keys(task)
    browser.find_element(By.CSS_SELECTOR, "input.search[data-table=episodes]").send_keys(task)
    assert _shown(browser, "#tasks tr td:nth-child(1)") == [task]
    shown = _shown(browser, "#episodes tr.episode td:nth-child(2)")
    assert shown == [task] * sum(r.task_id == task for r, _ in records) and len(shown) < len(records)

    # The state is in the link: the reload a live page makes when episodes arrive keeps it.
    browser.refresh()
    assert _shown(browser, "#tasks tr td:nth-child(1)") == [task]
    assert browser.find_element(By.CSS_SELECTOR, "input.search[data-table=tasks]").get_attribute("value") == task
    _no_console_errors(browser)


def test_a_column_heading_sorts_the_steps_by_number_and_the_order_survives_a_reload(
    grpo_run, browser, tmp_path
) -> None:
    """Twelve steps (the run's, and nine more written after them), where 10 and 11 sort after 9
    as numbers do, not between 1 and 2 as text does."""
    records = tmp_path / "records"
    shutil.copytree(grpo_run.records, records)
    rollouts = next((records / grpo_run.run).glob("rollouts-*.jsonl"))
    last = RolloutRecord.model_validate_json(rollouts.read_text().splitlines()[-1])
    with open(rollouts, "a") as file:
        for step in range(grpo_run.steps, 12):
            late = last.model_copy(update={"episode_id": f"late-{step}", "step": step, "group": 0, "group_index": 0})
            file.write(late.model_dump_json() + "\n")
    with serving(records) as url:
        browser.get(f"{url}/runs/{grpo_run.run}")
        pairs = set(zip(_cells(browser, "#steps a.step"), _cells(browser, "#steps td.mean-reward"), strict=True))
        step = browser.find_element(By.XPATH, "//table[@id='steps']//th[text()='step']")
        step.click()
        step.click()  # the second click: descending
        assert _cells(browser, "#steps a.step") == [str(n) for n in range(11, -1, -1)]
        browser.find_element(By.XPATH, "//table[@id='steps']//th[text()='mean reward']").click()
        means = _cells(browser, "#steps td.mean-reward")
        assert [float(m) for m in means] == sorted(float(m) for m in means)
        assert set(zip(_cells(browser, "#steps a.step"), means, strict=True)) == pairs  # whole rows moved
        browser.refresh()
        assert _cells(browser, "#steps td.mean-reward") == means


def test_behind_a_token_the_browser_opens_it_once_and_the_page_keeps_polling(grpo_run, browser, tmp_path) -> None:
    (tmp_path / "token").write_text("view-token\n")
    browser.get("about:blank")
    browser.get_log("browser")  # dropped: an earlier test's page polling the server that test stopped
    with serving(grpo_run.records, "--token-file", str(tmp_path / "token"), token="view-token") as url:
        assert httpx.get(f"{url}/runs/{grpo_run.run}", trust_env=False).status_code == 401
        browser.get(f"{url}/runs/{grpo_run.run}?token=view-token")
        assert "token" not in browser.current_url  # the cookie holds it from now on
        assert browser.find_element(By.ID, "episode-count").text == str(len(_records(grpo_run)))
        time.sleep(4)  # one poll of /api/count (every 3 s), which would log a 401 without the cookie
        browser.find_element(By.CSS_SELECTOR, "a.step").click()
        assert "/steps/" in browser.current_url
        _no_console_errors(browser)


def test_each_breadcrumb_of_an_episode_leads_to_the_page_it_names(grpo_run, viewer, browser) -> None:
    rollout = next(r for r, _ in _records(grpo_run) if r.group_index == 0)
    run, step, group = grpo_run.run, rollout.step, rollout.group
    titles = {
        "runs": "Runs",
        "run": f"Run {run}",
        "step": f"Run {run} · step {step}",
        "group": f"Run {run} · step {step} · group {group} ·",
        "episode": f"Episode {rollout.episode_id[:12]} ·",
    }
    for kind, title in titles.items():
        browser.get(f"{viewer}/episodes/{rollout.episode_id}")
        browser.find_element(By.CSS_SELECTOR, f"#crumbs a[data-kind={kind}]").click()
        heading = browser.find_element(By.TAG_NAME, "h1").text
        assert heading == title or (title.endswith("·") and heading.startswith(title)), (kind, heading)
        _no_console_errors(browser)
