"""The page at / in headless Chromium (Debian's, driven by its chromedriver): a translation
with its alignments in the model's languages, a document translated as a file, and a
caption with each word's attention drawn over the image; the screenshots are checked, not
just taken. The API's forms at /docs send their requests."""

from __future__ import annotations

import io
import json
import shutil
from urllib.parse import unquote

import httpx
import numpy as np
import pytest
from helpers import ROOT, PrefixProxy
from PIL import Image

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER), reason="chromium and chromium-driver are installed by ./dev.sh"
)
TEXT = "El perro come pan. ¿Dónde está la estación de tren?"


@pytest.fixture(scope="module")
def page_server(start_server):
    return start_server("--workers", "1", "--http-listen", "127.0.0.1:0")


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1280,1800", "--disable-gpu"):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def screenshot(element) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(element.screenshot_as_png)).convert("RGB"), float)


@pytest.mark.slow
def test_the_page_translates_with_alignments(page_server, browser, tmp_path):
    browser.get(page_server.http_url + "/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: d.find_element(By.ID, "health").text == "SERVING")
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#translator option")) == 1)
    for select, code in (("source-language", "es"), ("target-language", "en")):
        options = browser.find_elements(By.CSS_SELECTOR, f"#{select} option")
        assert [o.get_attribute("value") for o in options] == [code]  # the model's only one
    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys(TEXT)
    browser.find_element(By.ID, "translate-button").click()
    wait.until(lambda d: d.find_element(By.ID, "translation").text not in ("", "…"))
    expected = httpx.post(
        page_server.http_url + "/v1/translate",
        json={"texts": [TEXT], "options": {"beamSize": 4}},
        timeout=60,
    ).json()["translations"][0]
    assert browser.find_element(By.ID, "translation").text == expected["hypotheses"][0]["text"]
    assert browser.find_element(By.ID, "translated-by").text == "translator 1: es → en"
    # each text in its language, for a screen reader's voice
    assert browser.find_element(By.ID, "translation").get_attribute("lang") == "en"
    assert source.get_attribute("lang") == "es"
    tables = browser.find_elements(By.CSS_SELECTOR, "#alignments table")
    assert len(tables) == len(expected["sentences"]) == 2
    rows = tables[0].find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(rows) >= 3  # a row per target token of the first sentence
    shot = screenshot(tables[0])
    assert shot.std() > 10  # shaded cells, not a blank table
    browser.save_screenshot(str(tmp_path / "translate.png"))
    assert Image.open(tmp_path / "translate.png").size[0] >= 1000
    # a text of one sentence: its alignment is its hypothesis', drawn too
    before = browser.find_element(By.ID, "translation").text
    source.clear()
    source.send_keys("El perro come pan.")
    browser.find_element(By.ID, "translate-button").click()
    wait.until(lambda d: d.find_element(By.ID, "translation").text not in ("", "…", before))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#alignments table")) == 1


def test_the_page_translates_a_document_as_a_file(page_server, browser, tmp_path):
    """A .docx chosen on the page comes back as a link to the translated .docx: the one
    LibreTranslate's /translate_file gives for the same file and languages."""
    import docx

    original = docx.Document()
    for text in ("El perro come pan.", "¿Dónde está la estación de tren?"):
        original.add_paragraph(text)
    path = tmp_path / "carta.docx"
    original.save(path)
    browser.get(page_server.http_url + "/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#target-language option")) == 1)
    browser.find_element(By.ID, "document").send_keys(str(path))
    browser.find_element(By.ID, "file-button").click()
    link = browser.find_element(By.ID, "download")
    wait.until(lambda d: link.is_displayed())
    assert link.text == "carta.docx, translated" and link.get_attribute("download") == "carta.docx"
    with httpx.Client(timeout=60) as web:
        page_file = web.get(link.get_attribute("href"))
        direct = web.post(
            page_server.http_url + "/translate_file", data={"source": "es", "target": "en"},
            files={"file": ("carta.docx", path.read_bytes())},
        )  # fmt: skip
        expected = web.get(direct.json()["translatedFileUrl"])
    assert page_file.status_code == expected.status_code == 200

    def paragraphs(content: bytes) -> list[str]:
        return [p.text for p in docx.Document(io.BytesIO(content)).paragraphs]

    translated = paragraphs(page_file.content)
    assert translated == paragraphs(expected.content)
    assert len(translated) == 2 and all(translated)
    assert translated != [p.text for p in original.paragraphs]


def caption_section(page_server, browser) -> WebDriverWait:
    """The page opened at its Caption section once its captioner is listed -> a wait of 60 s."""
    browser.get(page_server.http_url + "/#caption")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#captioner option")) == 1)
    return wait


def captioned_scene(browser, wait: WebDriverWait):
    """examples/scene.png chosen and captioned, its drawings shown -> the image field."""
    image = browser.find_element(By.ID, "image")
    image.send_keys(str(ROOT / "examples" / "scene.png"))
    browser.find_element(By.ID, "caption-button").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#attention figure"))
    return image


def test_the_page_captions_and_draws_where_each_word_looked(page_server, browser):
    wait = caption_section(page_server, browser)
    browser.find_element(By.ID, "image").send_keys(str(ROOT / "examples" / "scene.png"))
    browser.find_element(By.ID, "caption-button").click()
    wait.until(lambda d: d.find_element(By.ID, "caption-text").text not in ("", "…"))
    caption = browser.find_element(By.ID, "caption-text").text
    figures = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#attention figure"))
    words = [f.find_element(By.TAG_NAME, "figcaption").text for f in figures]
    assert "".join(words).replace("▁", " ").replace("</s>", "").strip() == caption
    canvases = [f.find_element(By.TAG_NAME, "canvas") for f in figures]
    for canvas, word in zip(canvases, words, strict=True):  # each drawing named by its word
        name = word.replace("▁", "").replace("</s>", "").strip() or "the caption's end"
        assert canvas.get_attribute("role") == "img" and name in canvas.accessible_name
    shots = [screenshot(canvas) for canvas in canvases]
    for shot in shots:  # the image shows through the brightest cells, the rest is darkened
        assert shot.max() > 150 and shot.std() > 15
    # the words looked at different places: their drawings differ
    distinct = {tuple(np.round(s.mean(axis=(0, 1)), 0)) + (round(s.std(), 0),) for s in shots}
    assert len(distinct) >= len(shots) // 2


def api_forms(browser, url: str) -> dict:
    """The forms of /docs at `url` (a server's, or a proxy's prefix), by their titles
    ("POST /v1/translate")."""
    browser.get(url + "/docs")
    sections = WebDriverWait(browser, 60).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#operations section")
    )
    return {s.find_element(By.TAG_NAME, "h2").text: s for s in sections}


def sent(browser, form) -> str:
    """What `form` shows once its Send is answered: the status, then the body."""
    form.find_element(By.TAG_NAME, "button").click()
    output = form.find_element(By.TAG_NAME, "pre")
    WebDriverWait(browser, 60).until(lambda d: output.text[:3].isdigit())
    return output.text


def test_the_api_page_says_why_when_its_document_cannot_be_read(page_server, browser):
    """/docs draws its forms from openapi.json; where that cannot be fetched (blocked here,
    as an unreachable server's would be) it says so, not a blank page."""
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*openapi.json"]})
    try:
        browser.get(page_server.http_url + "/docs")
        said = WebDriverWait(browser, 60).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#operations [role=alert]")
        )
        assert said[0].text.startswith("The API's document (openapi.json) could not be read")
        assert not browser.find_elements(By.CSS_SELECTOR, "#operations section")
    finally:
        browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
    assert "POST /v1/translate" in api_forms(browser, page_server.http_url)  # once it can


def test_the_api_forms_send_requests(page_server, browser):
    forms = api_forms(browser, page_server.http_url)
    assert "POST /v1/translate" in forms
    output = sent(browser, forms["GET /v1/models"])
    assert output.startswith("200") and '"translator"' in output, output


def test_the_api_forms_attach_a_file_and_fill_a_path_parameter(page_server, browser, tmp_path):
    """The form of /translate_file sent no file (it had a JSON box alone, and the call takes
    a multipart form), and the one of /download_file/{name} asked for "{name}" itself: each
    has its fields now, a file picker for the file."""
    letter = tmp_path / "carta.txt"
    letter.write_text("El perro come pan.", encoding="utf-8")
    forms = api_forms(browser, page_server.http_url)
    upload = forms["POST /translate_file"]
    upload.find_element(By.CSS_SELECTOR, 'input[name="file"][type="file"]').send_keys(str(letter))
    upload.find_element(By.CSS_SELECTOR, 'input[name="source"]').send_keys("es")
    upload.find_element(By.CSS_SELECTOR, 'input[name="target"]').send_keys("en")
    output = sent(browser, upload)
    status, _, body = output.partition("\n")
    assert status == "200", output
    name = unquote(json.loads(body)["translatedFileUrl"].rpartition("/")[2])
    download = forms["GET /download_file/{name}"]
    download.find_element(By.CSS_SELECTOR, 'input[name="name"]').send_keys(name)
    output = sent(browser, download)
    assert output.startswith("200\n") and "dog" in output.lower(), output


@pytest.mark.slow
def test_the_page_and_the_api_forms_work_behind_a_proxy_at_a_path(start_server, browser):
    """Served at /attnserve by a proxy that strips it (`--http-root-path /attnserve`): the
    page lists the models and translates, and the forms at /docs read the document and send
    their calls, each under the proxy's path (they went to its root, where nothing answers)."""
    server = start_server(
        "--workers", "1", "--http-listen", "127.0.0.1:0", "--http-root-path", "/attnserve"
    )
    port = int(server.http_url.rpartition(":")[2])
    with PrefixProxy(port, "/attnserve") as proxy:
        browser.get(proxy.url + "/")
        wait = WebDriverWait(browser, 60)
        wait.until(lambda d: d.find_element(By.ID, "health").text == "SERVING")
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#translator option")) == 1)
        source = browser.find_element(By.ID, "source")
        source.clear()
        source.send_keys("El perro come pan.")
        browser.find_element(By.ID, "translate-button").click()
        wait.until(lambda d: d.find_element(By.ID, "translation").text not in ("", "…"))
        assert "dog" in browser.find_element(By.ID, "translation").text
        output = sent(browser, api_forms(browser, proxy.url)["GET /v1/models"])
        assert output.startswith("200") and '"translator"' in output, output


@pytest.mark.slow
def test_the_page_sends_the_token_a_server_asks_for(start_server, browser, tmp_path):
    """A server with tokens answers the page's calls only with one (the models' listing
    too): typed into the page, it goes with every call as a bearer token."""
    secret = "page-token-0123456789"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{secret}\n", encoding="utf-8")
    server = start_server(
        "--workers", "1", "--http-listen", "127.0.0.1:0", "--auth-tokens-file", str(tokens)
    )
    browser.get(server.http_url + "/")
    wait = WebDriverWait(browser, 60)
    refused = browser.find_element(By.ID, "translate-error")
    wait.until(lambda d: refused.is_displayed() and "could not be listed" in refused.text)
    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys("El perro come pan.")
    browser.find_element(By.ID, "translate-button").click()
    wait.until(lambda d: refused.is_displayed() and "could not be listed" not in refused.text)
    assert (
        "token" in refused.text.lower() or "401" in refused.text or "auth" in refused.text.lower()
    )
    token = browser.find_element(By.ID, "token")
    token.send_keys(secret)
    browser.find_element(By.ID, "translate-button").click()
    wait.until(lambda d: d.find_element(By.ID, "translation").text not in ("", "…"))
    assert "dog" in browser.find_element(By.ID, "translation").text
    # the API's forms send the token the page kept for the tab
    output = sent(browser, api_forms(browser, server.http_url)["POST /v1/translate"])
    assert output.startswith("200"), output


def settled(browser, path: str, calls: int) -> None:
    """Waits until `calls` requests to `path` have been answered, and the page has read them."""
    answered = (
        "return performance.getEntriesByType('resource')"
        ".filter((e) => new URL(e.name).pathname === arguments[0] && e.responseEnd > 0).length"
    )
    WebDriverWait(browser, 60).until(lambda d: d.execute_script(answered, path) >= calls)
    browser.execute_async_script("setTimeout(arguments[arguments.length - 1], 300)")


def test_translate_clicked_twice_shows_the_latest_answer_alone(page_server, browser):
    """Each click's answer appended its alignments: a text of two sentences clicked twice
    showed four tables, and a slower earlier answer could replace the later one's text."""
    browser.get(page_server.http_url + "/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#translator option")) == 1)
    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys(TEXT)
    button = browser.find_element(By.ID, "translate-button")
    button.click()
    button.click()
    settled(browser, "/v1/translate", 2)
    assert browser.find_element(By.ID, "translation").text not in ("", "…")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#alignments table")) == 2


def test_a_refused_caption_leaves_no_drawing_of_the_last_image(page_server, browser, tmp_path):
    """An image refused showed its error under the last image's drawings, as if they were
    this one's."""
    wait = caption_section(page_server, browser)
    image = captioned_scene(browser, wait)
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not an image")
    image.send_keys(str(broken))
    browser.find_element(By.ID, "caption-button").click()
    refused = browser.find_element(By.ID, "caption-error")
    wait.until(lambda d: refused.text)
    assert "not an image" in refused.text
    assert browser.find_element(By.ID, "caption-text").text == ""
    assert browser.find_elements(By.CSS_SELECTOR, "#attention figure") == []


def test_a_beam_left_empty_is_the_server_s_default(page_server, browser):
    """An emptied Beam field went as beamSize 0 and the call was refused ("beam_size must be
    in 1..16, got 0"), where an empty Max length is the server's own."""
    browser.get(page_server.http_url + "/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#translator option")) == 1)
    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys("El perro come pan.")
    browser.find_element(By.ID, "beam").clear()
    browser.find_element(By.ID, "translate-button").click()
    shown = lambda d: d.find_element(By.ID, "translation").text not in ("", "…")  # noqa: E731
    wait.until(lambda d: shown(d) or d.find_element(By.ID, "translate-error").text)
    assert browser.find_element(By.ID, "translate-error").text == ""
    expected = httpx.post(
        page_server.http_url + "/v1/translate", json={"texts": ["El perro come pan."]}, timeout=60
    ).json()["translations"][0]["hypotheses"][0]["text"]
    assert browser.find_element(By.ID, "translation").text == expected


def test_the_api_s_caption_forms_send_an_image_that_is_captioned(page_server, browser):
    """The caption forms had no example: the page wrote one from the schema, every option 0
    and no image, and each Send was refused (400, "beam_size must be in 1..16, got 0")."""
    forms = api_forms(browser, page_server.http_url)
    for title in ("POST /v1/caption", "POST /v1/caption:stream"):
        output = sent(browser, forms[title])
        assert output.startswith("200") and '"captions"' in output, output


@pytest.mark.slow
def test_the_page_s_health_follows_the_server(start_server, browser):
    """The health shown was read once, when the page opened: one opened while the server
    warmed up said NOT_SERVING for good, and one left open said SERVING after it stopped."""
    server = start_server("--workers", "1", "--http-listen", "127.0.0.1:0")
    browser.get(server.http_url + "/")
    health = browser.find_element(By.ID, "health")
    WebDriverWait(browser, 60).until(lambda d: health.text == "SERVING")
    assert server.terminate() == 0
    WebDriverWait(browser, 20).until(lambda d: health.text == "unreachable")


def test_a_glossary_target_may_hold_an_equals_sign(page_server, browser):
    """A glossary line was cut at every "=", and a line of more than two pieces was left
    out without a word: "contraseña = pass=phrase" was never applied."""
    text, term = "Cambia tu contraseña.", {"source": "contraseña", "target": "pass=phrase"}
    browser.get(page_server.http_url + "/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#translator option")) == 1)
    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys(text)
    browser.find_element(By.ID, "glossary").send_keys("contraseña = pass=phrase")
    browser.find_element(By.ID, "translate-button").click()
    wait.until(lambda d: d.find_element(By.ID, "translation").text not in ("", "…"))
    expected = httpx.post(
        page_server.http_url + "/v1/translate",
        json={"texts": [text], "glossary": [term], "options": {"beamSize": 4}},
        timeout=60,
    ).json()["translations"][0]["hypotheses"][0]["text"]
    assert "pass=phrase" in expected
    assert browser.find_element(By.ID, "translation").text == expected


def test_each_captioned_image_s_object_url_is_released(page_server, browser):
    """Each caption read its image through an object URL that was never revoked: a tab
    left open held every image it had captioned."""
    wait = caption_section(page_server, browser)
    browser.execute_script(
        "window.held = new Set();"
        "const create = URL.createObjectURL, revoke = URL.revokeObjectURL;"
        "URL.createObjectURL = (o) => { const url = create(o); held.add(url); return url; };"
        "URL.revokeObjectURL = (url) => { held.delete(url); revoke(url); };"
    )
    browser.find_element(By.ID, "image").send_keys(str(ROOT / "examples" / "scene.png"))
    for calls in (1, 2):
        browser.find_element(By.ID, "caption-button").click()
        settled(browser, "/v1/caption", calls)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#attention figure"))
    assert browser.execute_script("return held.size") == 0


def test_the_models_are_listed_once_a_token_is_typed(start_server, browser):
    """A server with tokens lists its models to a known token only: the page listed them
    once, as it opened, so a token typed then left both lists empty until a reload."""
    token = "a-token-of-sixteen-chars"
    flags = ("--workers", "1", "--http-listen", "127.0.0.1:0", "--auth-tokens", token)
    server = start_server(*flags)
    browser.get(server.http_url + "/")  # an origin of its own: no token kept for it
    wait = WebDriverWait(browser, 60)
    refused = browser.find_element(By.ID, "translate-error")
    wait.until(lambda d: "UNAUTHENTICATED" in refused.text)
    browser.find_element(By.ID, "token").send_keys(token + Keys.TAB)  # a change on leaving
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#translator option")) == 1)
    assert browser.find_elements(By.CSS_SELECTOR, "#captioner option")
    assert not refused.is_displayed()


@pytest.fixture
def unsendable_token(page_server, browser):
    """The tab keeps a token fetch cannot send (a header's value holds ISO-8859-1
    characters alone) until the test ends."""
    browser.get(page_server.http_url + "/docs")
    keep = "sessionStorage.setItem('attnserve-token', arguments[0])"
    browser.execute_script(keep, "contraseña→1")
    yield
    browser.execute_script("sessionStorage.removeItem('attnserve-token')")


def test_models_that_cannot_be_listed_say_why(page_server, browser, unsendable_token):
    """A failed /v1/models left both model lists empty without a word (an uncaught
    error in the console), as with a token the browser cannot put in a header."""
    browser.get(page_server.http_url + "/")
    wait = WebDriverWait(browser, 20)
    for error in ("translate-error", "caption-error"):
        shown = browser.find_element(By.ID, error)
        wait.until(lambda d, shown=shown: shown.is_displayed() and shown.text)
        assert shown.text.startswith("the models could not be listed: ")
    # the languages are the server's default model's, as where it has no list
    for select in ("source-language", "target-language"):
        options = browser.find_elements(By.CSS_SELECTOR, f"#{select} option")
        assert [o.get_attribute("value") for o in options] == [""]


def test_an_api_form_that_cannot_send_says_why(page_server, browser, unsendable_token):
    """A Send the browser could not make (a token it cannot put in a header, a server
    gone) showed nothing at all: the error went to the console."""
    models = api_forms(browser, page_server.http_url)["GET /v1/models"]
    models.find_element(By.TAG_NAME, "button").click()
    output = models.find_element(By.TAG_NAME, "pre")
    WebDriverWait(browser, 20).until(lambda d: output.text)
    assert output.text.startswith("not sent: ")


def test_a_caption_without_an_image_leaves_no_caption_of_the_last(page_server, browser):
    """Caption clicked with the image emptied said "choose an image first" under the last
    image's caption, as if it were this click's."""
    wait = caption_section(page_server, browser)
    image = captioned_scene(browser, wait)
    browser.execute_script("arguments[0].value = ''", image)  # as a chooser cancelled does
    browser.find_element(By.ID, "caption-button").click()
    refused = browser.find_element(By.ID, "caption-error")
    wait.until(lambda d: refused.text)
    assert refused.text == "choose an image first"
    assert browser.find_element(By.ID, "caption-text").text == ""
    assert browser.find_elements(By.CSS_SELECTOR, "#attention figure") == []


def test_a_file_answered_to_an_api_form_is_saved_under_its_own_name(page_server, browser):
    """A file whose name is not plain ASCII comes with `filename*=utf-8''...` (RFC 6266):
    the form's link saved it under the name percent-encoded (informe%20a%C3%B1o.docx)."""
    import docx

    original = io.BytesIO()
    docx.Document().save(original)
    with httpx.Client(timeout=60) as web:
        answer = web.post(
            page_server.http_url + "/translate_file", data={"source": "es", "target": "en"},
            files={"file": ("informe año.docx", original.getvalue())},
        )  # fmt: skip
    name = unquote(answer.json()["translatedFileUrl"].rpartition("/")[2])
    download = api_forms(browser, page_server.http_url)["GET /download_file/{name}"]
    download.find_element(By.CSS_SELECTOR, 'input[name="name"]').send_keys(name)
    download.find_element(By.TAG_NAME, "button").click()
    link = WebDriverWait(browser, 60).until(
        lambda d: download.find_elements(By.CSS_SELECTOR, "pre a")
    )[0]
    assert link.get_attribute("download") == "informe año.docx"


AXE = ROOT / "tests" / "server" / "node" / "node_modules" / "axe-core" / "axe.min.js"
# WCAG 2.0 and 2.1, levels A and AA; and axe's best practices (landmarks, headings' order,
# a table header's text) where they help the same users
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]
AXE_RUN = """
const done = arguments[arguments.length - 1];
axe.run(document, { runOnly: { type: "tag", values: arguments[0] } }).then(
  (results) => done({
    passes: results.passes.length,
    violations: results.violations.map((v) => ({
      id: v.id, impact: v.impact, targets: v.nodes.map((n) => n.target.join(" ")),
    })),
  }),
  (error) => done({ error: String(error) }),
);
"""


def axe_violations(browser) -> list[dict]:
    """axe-core's violations of AXE_TAGS' rules on the page as it is now: each {id, impact,
    targets}."""
    assert AXE.is_file(), "axe-core is installed by npm ci --prefix tests/server/node (./dev.sh)"
    if not browser.execute_script("return typeof axe === 'object'"):
        browser.execute_script(AXE.read_text(encoding="utf-8"))
    browser.set_script_timeout(60)
    results = browser.execute_async_script(AXE_RUN, AXE_TAGS)
    assert "error" not in results, results
    assert results["passes"] > 0  # the rules ran: a page they never checked passes nothing
    return results["violations"]


def opened(page_server, browser) -> WebDriverWait:
    """The page as loaded: the server's health read, its models listed -> a wait of 60 s."""
    browser.get(page_server.http_url + "/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: d.find_element(By.ID, "health").text == "SERVING")
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#translator option")) == 1)
    return wait


def translated(page_server, browser) -> None:
    """A text of two sentences translated, each one's alignment drawn."""
    wait = opened(page_server, browser)
    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys(TEXT)
    browser.find_element(By.ID, "translate-button").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#alignments table")) == 2)


def captioned(page_server, browser) -> None:
    """The scene captioned, each word's attention drawn over it."""
    captioned_scene(browser, caption_section(page_server, browser))


def refused(page_server, browser) -> None:
    """A document and an image asked for before either was chosen: both errors shown."""
    wait = opened(page_server, browser)
    browser.find_element(By.ID, "file-button").click()
    browser.find_element(By.ID, "caption-button").click()
    for error in ("translate-error", "caption-error"):
        wait.until(lambda d, error=error: d.find_element(By.ID, error).is_displayed())


def answered_form(page_server, browser) -> None:
    """The API's forms, one of them sent and its answer shown."""
    output = sent(browser, api_forms(browser, page_server.http_url)["GET /v1/models"])
    assert output.startswith("200"), output


@pytest.mark.parametrize("state", [opened, translated, captioned, refused, answered_form])
def test_the_pages_pass_axe_s_wcag_rules_in_each_state(page_server, browser, state):
    """axe-core's WCAG 2.0/2.1 A and AA rules (and its best practices) find nothing on the
    page as loaded, with a translation and its alignments, with a caption and its drawings,
    with errors shown, nor on the API's forms with an answer."""
    state(page_server, browser)
    violations = axe_violations(browser)
    assert not violations, "\n".join(
        f"{v['id']} ({v['impact']}): {', '.join(v['targets'])}" for v in violations
    )


def focus_by_tab(browser, element_id: str):
    """Tab, as the keyboard sends it to whatever has the focus (a file picker among them),
    until `element_id` has the focus -> the element; a tab order that never reaches it fails."""
    for _ in range(40):
        ActionChains(browser).send_keys(Keys.TAB).perform()
        focused = browser.switch_to.active_element
        if focused.get_attribute("id") == element_id:
            return focused
    raise AssertionError(f"Tab never reached #{element_id}")


def test_the_page_translates_by_keyboard_alone(page_server, browser):
    """From the page's top, Tab reaches the text, typing replaces it, Tab reaches Translate
    and Enter (then Space) presses it; the translation is written where a screen reader
    says it (a polite live region), and the focused button is drawn with its ring."""
    texts = ("El perro come pan.", "¿Dónde está la estación de tren?")
    expected = httpx.post(
        page_server.http_url + "/v1/translate",
        json={"texts": list(texts), "options": {"beamSize": 4}},  # the page's Beam
        timeout=60,
    ).json()["translations"]
    wait = opened(page_server, browser)
    translation = browser.find_element(By.ID, "translation")
    assert translation.get_attribute("aria-live") == "polite"
    for text, key, answer in zip(texts, (Keys.ENTER, Keys.SPACE), expected, strict=True):
        browser.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
        source = focus_by_tab(browser, "source")
        source.send_keys(Keys.CONTROL + "a")  # a modifier is held to the end of a call
        source.send_keys(text)
        assert source.get_attribute("value") == text
        button = focus_by_tab(browser, "translate-button")
        ring = browser.execute_script(
            "const s = getComputedStyle(arguments[0]); return [s.outlineStyle, s.outlineWidth]",
            button,
        )
        assert ring[0] != "none" and float(ring[1].removesuffix("px")) >= 2, ring
        before = translation.text
        button.send_keys(key)
        wait.until(lambda d, before=before: translation.text not in ("", "…", before))
        assert translation.text == answer["hypotheses"][0]["text"]
        assert translation.get_attribute("aria-busy") is None  # said, not held back
