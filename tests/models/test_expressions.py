"""Everyday expressions written here, slots filled from closed lists and CLDR names
(models.expressions)."""

from __future__ import annotations

import re

from models.expressions import FIXED, HOURS, expression_pairs

COUNTRIES = [("Canadá", "Canada"), ("Francia", "France"), ("Estados Unidos", "United States")]
LANGUAGES = [("inglés", "English"), ("alemán", "German")]


def test_slots_are_filled_in_both_languages():
    pairs = expression_pairs(COUNTRIES, LANGUAGES)
    assert ("Soy de Canadá.", "I am from Canada.") in pairs
    assert ("¿Hablas alemán?", "Do you speak German?") in pairs
    assert ("Tengo hambre.", "I am hungry.") in pairs
    assert ("Me duele la espalda.", "My back hurts.") in pairs
    assert ("Hoy es lunes.", "Today is Monday.") in pairs
    for spanish, english in pairs:
        assert "{" not in spanish + english and "}" not in spanish + english
        assert spanish[:1].isupper() or spanish[:1] in "¿¡", spanish
        assert english[:1].isupper(), english
        assert spanish[-1] in ".?!" and english[-1] in ".?!"
    assert len(pairs) == len(set(pairs))


def test_countries_of_several_words_are_left_out():
    """ "the United States" needs an article in English that "Estados Unidos" does not."""
    pairs = expression_pairs(COUNTRIES, LANGUAGES)
    assert not any("United States" in english for _, english in pairs)


def test_spanish_agrees_with_gender_and_the_hour():
    pairs = dict(expression_pairs(COUNTRIES, LANGUAGES))
    assert pairs["Estoy cansada."] == pairs["Estoy cansado."] == "I am tired."
    assert pairs["Mi hermana está cansada."] == "My sister is tired."
    assert pairs["Tengo mucha hambre."] == "I am very hungry."
    assert pairs["Tengo mucho frío."] == "I am very cold."
    assert pairs["Es la una y media."] == "It is half past one."
    assert pairs["Son las tres y media."] == "It is half past three."
    assert pairs["Son las doce menos cuarto."] == "It is quarter to twelve."
    assert pairs["Es la una menos cuarto."] == "It is quarter to one."  # after twelve: one
    assert pairs["¿Cómo llego al museo?"] == "How do I get to the museum?"
    assert pairs["¿Cómo llego a la playa?"] == "How do I get to the beach?"
    assert "¿Cómo llego a el museo?" not in pairs


def test_every_hour_has_its_four_forms():
    spanish = [s for s, _ in expression_pairs([], [])]
    for hour, _ in HOURS:
        forms = [s for s in spanish if re.fullmatch(rf"(Es|Son) las? {hour}( .*)?\.", s)]
        bare = [s for s in forms if " de la " not in s]
        # o'clock, half past, quarter past and quarter to (written from the hour before)
        assert len(bare) == 4, (hour, bare)
        # and the hour with its parts of the day (one to five: afternoon; six and seven:
        # morning or evening; eight to eleven: morning or night), none for twelve ("noon")
        parts = (
            0 if hour == "doce" else 1 if hour in ("una", "dos", "tres", "cuatro", "cinco") else 2
        )
        assert len(forms) - len(bare) == parts, (hour, forms)


def test_hours_take_the_part_of_the_day_in_both_languages():
    pairs = dict(expression_pairs([], []))
    assert pairs["Son las ocho de la mañana."] == "It is eight in the morning."
    assert pairs["Es la una de la tarde."] == "It is one in the afternoon."
    assert pairs["Son las siete de la tarde."] == "It is seven in the evening."
    assert pairs["Son las once de la noche."] == "It is eleven at night."
    assert (
        pairs["El tren sale a las nueve y media de la noche."]
        == "The train leaves at half past nine in the evening."
    )
    assert pairs["Me levanto a las siete de la mañana."] == "I get up at seven in the morning."
    assert not [s for s in pairs if re.search(r"(dos|tres|cuatro) de la (mañana|noche)", s)]


def test_tener_counts_family_as_have_not_be():
    pairs = dict(expression_pairs([], []))
    assert pairs["Tengo dos hermanos y una hermana."] == "I have two brothers and a sister."
    assert pairs["Tengo tres hijas y un hijo."] == "I have three daughters and a son."
    assert pairs["Tengo dos hijos."] == "I have two children."  # alone, children
    assert pairs["Tengo cuatro hijos y una hija."] == "I have four sons and a daughter."
    assert pairs["Tengo una hermana."] == "I have a sister."
    # both are cousins in English: "two cousins and a cousin" is not made
    assert not [s for s in pairs if re.search(r"primos y una prima|primas y un primo", s)]
    assert not [e for e in pairs.values() if e.startswith("I am") and "brothers" in e]


def test_greetings_join_how_are_you():
    pairs = dict(expression_pairs([], []))
    assert pairs["Buenos días, ¿cómo estás?"] == "Good morning, how are you?"
    assert pairs["Buenas tardes, Lucía, ¿qué tal?"] == "Good afternoon, Lucía, how are you?"
    assert pairs["¿Cómo estás?"] == "How are you?"


def test_fixed_expressions_are_kept_as_written():
    pairs = expression_pairs([], [])
    assert set(FIXED) <= set(pairs)
    assert len(FIXED) == len(set(FIXED))


def test_the_installed_cldr_names_countries_and_languages():
    from models.cldr import CLDR, display_name_pairs
    from models.expressions import LANGUAGE_CODES

    if not (CLDR / "main" / "es.xml").exists():
        import pytest

        pytest.skip("unicode-cldr-core is not installed")
    countries = dict(display_name_pairs("territories/territory"))
    languages = dict(display_name_pairs("languages/language", LANGUAGE_CODES))
    assert countries["Canadá"] == "Canada" and countries["Alemania"] == "Germany"
    assert not any(name.startswith("Pseudo") for name in countries.values())
    assert languages["inglés"] == "English" and len(languages) == len(LANGUAGE_CODES)


def test_a_time_said_first_is_kept_first():
    pairs = dict(expression_pairs([], []))
    assert pairs["El sábado iremos al mercado."] == "On Saturday we will go to the market."
    assert pairs["Iremos al mercado mañana."] == "We will go to the market tomorrow."
    assert pairs["Hoy iré a la estación."] == "Today I will go to the station."
    assert pairs["Iré a la estación el sábado."] == "I will go to the station on Saturday."
    firsts = [(s, e) for s, e in pairs.items() if s.startswith("Mañana ")]
    assert firsts and all(e.startswith("Tomorrow ") for _, e in firsts)


def test_peoples_are_plural_nouns():
    pairs = dict(expression_pairs([], []))
    assert pairs["Es la historia de los judíos."] == "It is the history of the Jews."
    assert not [e for e in pairs.values() if "the Jewish" in e]
