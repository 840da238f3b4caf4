"""Languages as the edge names them: ISO 639-1 codes, their English names, which languages a
model reads and writes (its manifest's `languages`), and which of a set a text is written in
(py3langid: its model ships in its wheel, nothing is fetched at run time)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from service.runtime import markup

# English names of the languages a served model may declare (ISO 639-1; M2M100's few
# others by their ISO 639-2 codes, as it names them)
NAMES = {
    "af": "Afrikaans", "am": "Amharic", "ar": "Arabic", "ast": "Asturian", "az": "Azerbaijani",
    "ba": "Bashkir", "be": "Belarusian", "bg": "Bulgarian", "bn": "Bengali", "br": "Breton",
    "bs": "Bosnian", "ca": "Catalan", "ceb": "Cebuano", "cs": "Czech", "cy": "Welsh",
    "da": "Danish", "de": "German", "el": "Greek", "en": "English", "es": "Spanish",
    "et": "Estonian", "eu": "Basque", "fa": "Persian", "ff": "Fulah", "fi": "Finnish",
    "fr": "French", "fy": "Western Frisian", "ga": "Irish", "gd": "Scottish Gaelic",
    "gl": "Galician", "gu": "Gujarati", "ha": "Hausa", "he": "Hebrew", "hi": "Hindi",
    "hr": "Croatian", "ht": "Haitian Creole", "hu": "Hungarian", "hy": "Armenian",
    "id": "Indonesian", "ig": "Igbo", "ilo": "Iloko", "is": "Icelandic", "it": "Italian",
    "ja": "Japanese", "jv": "Javanese", "ka": "Georgian", "kk": "Kazakh", "km": "Khmer",
    "kn": "Kannada", "ko": "Korean", "lb": "Luxembourgish", "lg": "Ganda", "ln": "Lingala",
    "lo": "Lao", "lt": "Lithuanian", "lv": "Latvian", "mg": "Malagasy", "mk": "Macedonian",
    "ml": "Malayalam", "mn": "Mongolian", "mr": "Marathi", "ms": "Malay", "my": "Burmese",
    "nb": "Norwegian Bokmål", "ne": "Nepali", "nl": "Dutch", "no": "Norwegian",
    "ns": "Northern Sotho", "oc": "Occitan", "or": "Odia", "pa": "Punjabi", "pl": "Polish",
    "ps": "Pashto", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sd": "Sindhi",
    "si": "Sinhala", "sk": "Slovak", "sl": "Slovenian", "so": "Somali", "sq": "Albanian",
    "sr": "Serbian", "ss": "Swati", "su": "Sundanese", "sv": "Swedish", "sw": "Swahili",
    "ta": "Tamil", "te": "Telugu", "th": "Thai", "tl": "Tagalog", "tn": "Tswana", "tr": "Turkish",
    "uk": "Ukrainian", "ur": "Urdu", "uz": "Uzbek", "vi": "Vietnamese", "wo": "Wolof",
    "xh": "Xhosa", "yi": "Yiddish", "yo": "Yoruba", "zh": "Chinese", "zt": "Chinese (traditional)",
    "zu": "Zulu",
}  # fmt: skip
# NLLB's FLORES-200 codes of the languages above, and the code the edge names each by (as
# LibreTranslate does: ISO 639-1, `zt` for Chinese in traditional script)
FLORES = {
    "arb_Arab": "ar", "bul_Cyrl": "bg", "cat_Latn": "ca", "ces_Latn": "cs", "dan_Latn": "da",
    "deu_Latn": "de", "ell_Grek": "el", "eng_Latn": "en", "spa_Latn": "es", "est_Latn": "et",
    "eus_Latn": "eu", "pes_Arab": "fa", "fin_Latn": "fi", "fra_Latn": "fr", "gle_Latn": "ga",
    "glg_Latn": "gl", "heb_Hebr": "he", "hin_Deva": "hi", "hrv_Latn": "hr", "hun_Latn": "hu",
    "ind_Latn": "id", "ita_Latn": "it", "jpn_Jpan": "ja", "kor_Hang": "ko", "lit_Latn": "lt",
    "lvs_Latn": "lv", "zsm_Latn": "ms", "nob_Latn": "nb", "nld_Latn": "nl", "pol_Latn": "pl",
    "por_Latn": "pt", "ron_Latn": "ro", "rus_Cyrl": "ru", "slk_Latn": "sk", "slv_Latn": "sl",
    "als_Latn": "sq", "swe_Latn": "sv", "tha_Thai": "th", "tur_Latn": "tr", "ukr_Cyrl": "uk",
    "urd_Arab": "ur", "vie_Latn": "vi", "zho_Hans": "zh", "zho_Hant": "zt",
}  # fmt: skip
# ISO 639-3 codes of the languages above, as a multilingual Marian names its targets
# (OPUS-MT's `>>fra<<`, `>>spa<<`), and the code the edge names each by; a macrolanguage's
# code and its most written member's both (`ara` and `arb`, `zho` and `cmn`)
ISO_639_3 = {
    "afr": "af", "amh": "am", "ara": "ar", "arb": "ar", "aze": "az", "bak": "ba", "bel": "be",
    "bul": "bg", "ben": "bn", "bre": "br", "bos": "bs", "cat": "ca", "ces": "cs", "cym": "cy",
    "dan": "da", "deu": "de", "ell": "el", "eng": "en", "spa": "es", "est": "et", "ekk": "et",
    "eus": "eu", "fas": "fa", "pes": "fa", "ful": "ff", "fin": "fi", "fra": "fr", "fry": "fy",
    "gle": "ga", "gla": "gd", "glg": "gl", "guj": "gu", "hau": "ha", "heb": "he", "hin": "hi",
    "hrv": "hr", "hat": "ht", "hun": "hu", "hye": "hy", "ind": "id", "ibo": "ig", "isl": "is",
    "ita": "it", "jpn": "ja", "jav": "jv", "kat": "ka", "kaz": "kk", "khm": "km", "kan": "kn",
    "kor": "ko", "ltz": "lb", "lug": "lg", "lin": "ln", "lao": "lo", "lit": "lt", "lav": "lv",
    "lvs": "lv", "mlg": "mg", "mkd": "mk", "mal": "ml", "mon": "mn", "mar": "mr", "msa": "ms",
    "zsm": "ms", "mya": "my", "nob": "nb", "nep": "ne", "npi": "ne", "nld": "nl", "nor": "no",
    "nso": "ns", "oci": "oc", "ori": "or", "pan": "pa", "pol": "pl", "pus": "ps", "por": "pt",
    "ron": "ro", "rus": "ru", "snd": "sd", "sin": "si", "slk": "sk", "slv": "sl", "som": "so",
    "sqi": "sq", "als": "sq", "srp": "sr", "ssw": "ss", "sun": "su", "swe": "sv", "swa": "sw",
    "swh": "sw", "tam": "ta", "tel": "te", "tha": "th", "tgl": "tl", "tsn": "tn", "tur": "tr",
    "ukr": "uk", "urd": "ur", "uzb": "uz", "vie": "vi", "wol": "wo", "xho": "xh", "yid": "yi",
    "yor": "yo", "zho": "zh", "cmn": "zh", "zul": "zu",
}  # fmt: skip
# mBART-50's codes: a language's ISO 639-1 code and a region (`es_XX`), the edge naming each
# by the language alone (its one Chinese, `zh_CN`, is written in simplified script)
MBART50 = (
    "ar_AR", "cs_CZ", "de_DE", "en_XX", "es_XX", "et_EE", "fi_FI", "fr_XX", "gu_IN", "hi_IN",
    "it_IT", "ja_XX", "kk_KZ", "ko_KR", "lt_LT", "lv_LV", "my_MM", "ne_NP", "nl_XX", "ro_RO",
    "ru_RU", "si_LK", "tr_TR", "vi_VN", "zh_CN", "af_ZA", "az_AZ", "bn_IN", "fa_IR", "he_IL",
    "hr_HR", "id_ID", "ka_GE", "km_KH", "mk_MK", "ml_IN", "mn_MN", "mr_IN", "pl_PL", "ps_AF",
    "pt_XX", "sv_SE", "sw_KE", "ta_IN", "te_IN", "th_TH", "tl_XX", "uk_UA", "ur_PK", "xh_ZA",
    "gl_ES", "sl_SI",
)  # fmt: skip
# a model's own code -> the code the edge names it by, where they differ
EDGE_CODES = {**ISO_639_3, **FLORES, **{code: code[:2] for code in MBART50}}
# codes clients send for one of the above (LibreTranslate's own aliases), written as
# given_code compares them
ALIASES = {"zh-hans": "zh", "zh-hant": "zt", "zh-cn": "zh", "zh-tw": "zt"}


# the codes above that are no BCP 47 tag (LibreTranslate's `zt`, M2M100's `ns`), and the
# tag of each: what a translated document declares its language as
TAGS = {"zt": "zh-Hant", "ns": "nso"}


def tag(code: str) -> str:
    """A model's language code as a BCP 47 tag, as a document declares its language:
    `spa_Latn`, `es_XX` and `spa` as `es`, `zho_Hant` as `zh-Hant`, a region after `-`."""
    edge = edge_code(code)
    return TAGS.get(edge, edge.replace("_", "-"))


def primary(code: str) -> str:
    """A language tag's primary subtag, lowered: `es` of `es`, `es-ES`, `ES_es`."""
    return code.strip().replace("_", "-").partition("-")[0].lower()


def edge_code(code: str) -> str:
    """A model's language code as the edge names it: NLLB's `spa_Latn`, mBART-50's `es_XX`
    and a multilingual Marian's `spa` as `es`, any other as it is."""
    return EDGE_CODES.get(code, code)


def given_code(code: str, known: Sequence[str]) -> str:
    """The code of `known` a client means by `code`, compared in any case and with `_` as
    `-`: itself; else the longest of its leading parts that is one or an alias of one
    (`zh-Hant-TW`: `zh-hant`, LibreTranslate's `zt`; `pt-BR`: `pt`), a region dropped but
    never a script (`sr-Latn` is not `sr`) nor what an alias names (`zh-TW` is `zt`, never
    `zh`); else `code` so written, or the alias it names."""
    wanted = _compared(code)
    by_form = {_compared(k): k for k in known}
    parts = wanted.split("-")
    for count in range(len(parts), 0, -1):
        lead = "-".join(parts[:count])
        if lead in by_form:
            return by_form[lead]
        if lead in ALIASES:
            return by_form.get(ALIASES[lead], ALIASES[lead])
        if len(parts[count - 1]) == 4 and parts[count - 1].isalpha() and count > 1:
            break  # a script: the language without it is another written language
    return wanted


def _compared(code: str) -> str:
    return code.strip().lower().replace("_", "-")


def name(code: str) -> str:
    """The language's English name; the code itself for one not in NAMES."""
    return NAMES.get(code, code)


DETECT_CHARS = 2000  # the most of a text the identifier reads


@dataclass(frozen=True)
class Languages:
    """What a model reads and writes, as its manifest declares (empty: not declared)."""

    source: tuple[str, ...] = ()
    target: tuple[str, ...] = ()

    @classmethod
    def from_manifest(cls, manifest: dict) -> Languages:
        declared = manifest.get("languages", {})
        return cls(tuple(declared.get("source", ())), tuple(declared.get("target", ())))

    def pairs(self) -> list[tuple[str, str]]:
        return [(s, t) for s in self.source for t in self.target if s != t]

    def covers(self, source: str, target: str) -> bool:
        """Whether the model reads `source` (any where empty) and writes `target`."""
        return (not source or source in self.source) and target in self.target


@dataclass(frozen=True)
class LanguageTokens:
    """How a multilingual model is told its languages (its manifest's `languages`): a token
    per language (`tokens`, code -> id), put before the source for the source language
    (`source_token`), and for the target language either forced as the decoder's first token
    (`target_token` "decoder", as M2M100's generate forces it) or put before the source
    ("source", a multilingual Marian's `>>xx<<`)."""

    tokens: dict[str, int]
    source_token: bool = False
    target_token: str = ""

    @classmethod
    def from_manifest(cls, manifest: dict) -> LanguageTokens:
        declared = manifest.get("languages", {})
        return cls(
            {code: int(i) for code, i in declared.get("tokens", {}).items()},
            bool(declared.get("source_token", False)),
            declared.get("target_token", ""),
        )

    def source_prefix(self, source: str, target: str) -> list[int]:
        """The tokens before every source's own."""
        if self.source_token:
            return [self.tokens[source]]
        if self.target_token == "source":
            return [self.tokens[target]]
        return []

    def source_ids(self, ids: list[int], source: str, target: str) -> list[int]:
        """A source's ids as the model reads them: the tokens before every source's own
        (source_prefix), then its own, less a language token it starts with (a Marian
        text's `>>fr<<`) where those tokens tell the languages: the model is told the
        request's, once."""
        lead = self.source_prefix(source, target)
        if lead and ids and ids[0] in self.tokens.values():
            ids = ids[1:]
        return lead + ids

    def decoder_prefix(self, target: str) -> tuple[int, ...]:
        """The tokens every output starts with, given to the model."""
        return (self.tokens[target],) if self.target_token == "decoder" else ()


def shown(code: str, most: int = 40) -> str:
    """A code a client sent, for a message: as given, or the start of a longer one, so that
    a message naming several problems shows each (the front cuts a whole status message to
    what a gRPC client reads: servicer.shortened)."""
    if len(code) <= most:
        return repr(code)
    return f"{code[:most]!r}... ({len(code)} characters)"


def listed(codes: Sequence[str], most: int = 12) -> str:
    """Codes for a message: all of a few, the first `most` of many."""
    if len(codes) <= most:
        return ", ".join(codes)
    return f"{', '.join(codes[:most])}, ... ({len(codes)} in all)"


@functools.cache
def _identifier():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


@functools.cache
def _known() -> frozenset[str]:
    return frozenset(_identifier().nb_classes)


def sample(texts: Sequence[str], text_format: str = "plain") -> str:
    """What detection reads of `texts`: their words (a text in HTML or XML without its
    markup, whose tag and attribute names are no language's), the first DETECT_CHARS of
    them."""
    taken, size = [], 0
    for text in texts:
        if size >= DETECT_CHARS:
            break
        text = text[: 50 * DETECT_CHARS]  # markup enough to find the words in
        if text_format != "plain":
            text = markup.blanked(text, text_format)
        words = " ".join(text.split())
        taken.append(words)
        size += len(words) + 1
    return " ".join(taken)


def detect(text: str, among: Sequence[str]) -> list[tuple[str, float]]:
    """The languages of `among` that `text` may be written in, most likely first, each with
    its probability in [0, 1] among them. A language the identifier does not know is never
    proposed; with none it knows, the first of `among` with probability 0."""
    text = text[:DETECT_CHARS]  # enough to tell; a long text must not hold the event loop
    own = {edge_code(code): code for code in among}  # NLLB's `spa_Latn` told as `es`
    known = [code for code in own if code in _known()]
    if not known:
        return [(among[0], 0.0)] if among else []
    if len(known) == 1:
        return [(own[known[0]], 1.0)]
    identifier = _identifier()
    identifier.set_languages(known)  # the event loop's thread alone calls this
    return [(own[code], float(p)) for code, p in identifier.rank(text)]


def edge_given(given: str, codes: Sequence[str]) -> str:
    """The edge's code a client means by `given` among models' own `codes`: one of them or
    of their edge codes (given_code), as the edge names it."""
    return edge_code(given_code(given, [*codes, *(edge_code(code) for code in codes)]))


def own_code(given: str, codes: Sequence[str]) -> str:
    """The code of `codes` (a model's own) a client means by `given`: one of them, or as the
    edge names it (`es` for `spa_Latn`), in any case, an alias or with a region (given_code);
    else `given` as it is."""
    if not given or given in codes:
        return given
    edge = {edge_code(code): code for code in codes}
    found = given_code(given, [*codes, *edge])
    if found in codes:  # the model's own first: `pt` beside `por_Latn` is `pt`
        return found
    return edge.get(found, given)
