"""Everyday expressions written here: greetings, names, where one is from, languages, the
time, days and months, the weather, how one feels, family, aches and directions.

The phrasebook (models.phrasebook) fills noun, verb and adjective slots with dictionary words;
what it cannot give is the fixed turn of phrase a language has for an everyday thing: "Tengo
hambre" is "I am hungry", "Hace frío" is "It is cold", "Me duele la espalda" is "My back
hurts", "Son las tres y media" is "It is half past three". Each pattern here is one such
expression in both languages, with a slot filled from a small closed list written here
(hours, days, family, body, places, people's names) or from CLDR (country and language
names, both sides translated by CLDR's translators). Lists are short and every filler is
used, so the result is small (a few thousand pairs) and fully determined: no sampling.

Spanish agreement is written out where it matters: states ("cansado" / "cansada") come in
both genders, "mucho" / "mucha" follows the noun of "tener" expressions, "a las" / "a la"
follows the hour. English takes a capital for days, months and languages.
"""

from __future__ import annotations

from collections.abc import Iterable

from models.phrasebook import spanish_feminine

# -- closed lists (Spanish, English) ----------------------------------------------------------

NAMES_FEMININE = ("María", "Ana", "Lucía", "Sofía", "Elena", "Carmen", "Laura", "Isabel")
NAMES_MASCULINE = ("Juan", "Pedro", "Carlos", "Miguel", "Javier", "Pablo", "Luis", "Diego")
DAYS = (
    ("lunes", "lunes", "Monday"),
    ("martes", "martes", "Tuesday"),
    ("miércoles", "miércoles", "Wednesday"),
    ("jueves", "jueves", "Thursday"),
    ("viernes", "viernes", "Friday"),
    ("sábado", "sábados", "Saturday"),
    ("domingo", "domingos", "Sunday"),
)  # (singular, plural, English)
MONTHS = (
    ("enero", "January"), ("febrero", "February"), ("marzo", "March"), ("abril", "April"),
    ("mayo", "May"), ("junio", "June"), ("julio", "July"), ("agosto", "August"),
    ("septiembre", "September"), ("octubre", "October"), ("noviembre", "November"),
    ("diciembre", "December"),
)  # fmt: skip
HOURS = (
    ("una", "one"), ("dos", "two"), ("tres", "three"), ("cuatro", "four"), ("cinco", "five"),
    ("seis", "six"), ("siete", "seven"), ("ocho", "eight"), ("nueve", "nine"), ("diez", "ten"),
    ("once", "eleven"), ("doce", "twelve"),
)  # fmt: skip
AGES = tuple(range(2, 91, 3))
FAMILY = (
    ("padre", "father", "m"), ("madre", "mother", "f"), ("hermano", "brother", "m"),
    ("hermana", "sister", "f"), ("hijo", "son", "m"), ("hija", "daughter", "f"),
    ("abuelo", "grandfather", "m"), ("abuela", "grandmother", "f"), ("tío", "uncle", "m"),
    ("tía", "aunt", "f"), ("primo", "cousin", "m"), ("prima", "cousin", "f"),
    ("marido", "husband", "m"), ("mujer", "wife", "f"), ("novio", "boyfriend", "m"),
    ("novia", "girlfriend", "f"), ("amigo", "friend", "m"), ("amiga", "friend", "f"),
    ("vecino", "neighbour", "m"), ("vecina", "neighbour", "f"), ("jefe", "boss", "m"),
)  # fmt: skip
# Counted family: ((masculine Spanish, English), (feminine Spanish, English)), plurals in -s in
# both languages; "hijos" alone are children, beside "una hija" they are sons
KIN = (
    (("hermano", "brother"), ("hermana", "sister")),
    (("hijo", "son"), ("hija", "daughter")),
    (("nieto", "grandson"), ("nieta", "granddaughter")),
    (("primo", "cousin"), ("prima", "cousin")),
)
COUNTS = (("dos", "two"), ("tres", "three"), ("cuatro", "four"), ("cinco", "five"))
GREETINGS = (
    ("Hola", "Hello"),
    ("Buenos días", "Good morning"),
    ("Buenas tardes", "Good afternoon"),
    ("Buenas noches", "Good evening"),
)
HOW_ARE_YOU = (
    ("¿cómo estás?", "how are you?"), ("¿qué tal?", "how are you?"),
    ("¿cómo está usted?", "how are you?"), ("¿qué tal estás?", "how are you doing?"),
    ("¿cómo te va?", "how is it going?"),
)  # fmt: skip
# A time said first, then a plan: "Mañana iremos al mercado." is "Tomorrow we will go to the
# market.", the time kept (a sentence that opens with it must not lose it)
WHEN_FIRST = (
    ("mañana", "tomorrow"), ("hoy", "today"), ("esta tarde", "this afternoon"),
    ("esta noche", "tonight"), ("el sábado", "on Saturday"),
    ("la semana que viene", "next week"), ("pasado mañana", "the day after tomorrow"),
)  # fmt: skip
GOING = (
    ("iremos", "we will go"),
    ("iré", "I will go"),
    ("vamos", "we are going"),
    ("voy", "I am going"),
)
COMPANY = (
    ("mi hermano", "my brother"), ("mis hermanos", "my brothers"), ("mis padres", "my parents"),
    ("mi madre", "my mother"), ("mis amigos", "my friends"), ("los niños", "the children"),
    ("mi hija", "my daughter"),
)  # fmt: skip
# Peoples named by a plural noun: "los judíos" are "the Jews", where the dictionary's
# adjective ("judío" / "Jewish") would give "the Jewish"
PEOPLES = (
    ("judíos", "Jews"), ("griegos", "Greeks"), ("romanos", "Romans"), ("egipcios", "Egyptians"),
    ("alemanes", "Germans"), ("italianos", "Italians"), ("rusos", "Russians"),
    ("árabes", "Arabs"), ("turcos", "Turks"), ("mexicanos", "Mexicans"),
    ("americanos", "Americans"), ("canadienses", "Canadians"),
)  # fmt: skip
BODY = (
    ("la cabeza", "head"), ("el estómago", "stomach"), ("la espalda", "back"),
    ("la garganta", "throat"), ("la pierna", "leg"), ("el brazo", "arm"), ("el pie", "foot"),
    ("la mano", "hand"), ("la muela", "tooth"), ("el oído", "ear"), ("la rodilla", "knee"),
    ("el cuello", "neck"), ("el hombro", "shoulder"), ("el ojo", "eye"),
)  # fmt: skip
STATES = (
    ("cansado", "tired"), ("contento", "happy"), ("enfermo", "ill"), ("aburrido", "bored"),
    ("nervioso", "nervous"), ("preocupado", "worried"), ("ocupado", "busy"), ("listo", "ready"),
    ("enfadado", "angry"), ("triste", "sad"), ("perdido", "lost"), ("mojado", "wet"),
    ("despierto", "awake"), ("dormido", "asleep"),
)  # fmt: skip
# "tener" + noun where English says "to be" + adjective: (noun, English, gender of the noun)
FEELINGS = (
    ("hambre", "hungry", "f"), ("sed", "thirsty", "f"), ("frío", "cold", "m"),
    ("calor", "hot", "m"), ("sueño", "sleepy", "m"), ("miedo", "afraid", "m"),
    ("prisa", "in a hurry", "f"), ("razón", "right", "f"), ("suerte", "lucky", "f"),
)  # fmt: skip
WEATHER = (
    ("hace frío", "it is cold"), ("hace calor", "it is hot"), ("hace sol", "it is sunny"),
    ("hace viento", "it is windy"), ("hace buen tiempo", "the weather is nice"),
    ("hace mal tiempo", "the weather is bad"), ("llueve", "it rains"), ("nieva", "it snows"),
    ("está nublado", "it is cloudy"), ("hay niebla", "it is foggy"),
)  # fmt: skip
WEATHER_NOW = (
    ("Está lloviendo", "It is raining"),
    ("Está nevando", "It is snowing"),
    ("Está lloviendo mucho", "It is raining hard"),
    ("Ya no llueve", "It has stopped raining"),
)
WHEN = (
    ("hoy", "today"),
    ("esta mañana", "this morning"),
    ("esta tarde", "this afternoon"),
    ("esta noche", "tonight"),
    ("en invierno", "in winter"),
    ("en verano", "in summer"),
)
# (Spanish with its article, gender, English noun)
PLACES = (
    ("la estación", "f", "station"), ("el aeropuerto", "m", "airport"),
    ("el hotel", "m", "hotel"), ("el banco", "m", "bank"), ("el hospital", "m", "hospital"),
    ("la farmacia", "f", "pharmacy"), ("el museo", "m", "museum"), ("la playa", "f", "beach"),
    ("el mercado", "m", "market"), ("el parque", "m", "park"),
    ("la biblioteca", "f", "library"), ("el supermercado", "m", "supermarket"),
    ("el restaurante", "m", "restaurant"), ("la iglesia", "f", "church"),
    ("la escuela", "f", "school"), ("la universidad", "f", "university"),
    ("la oficina", "f", "office"), ("el cine", "m", "cinema"), ("el teatro", "m", "theatre"),
    ("la parada de autobús", "f", "bus stop"), ("la comisaría", "f", "police station"),
    ("el centro", "m", "city centre"), ("la panadería", "f", "bakery"),
    ("el puerto", "m", "harbour"), ("el ayuntamiento", "m", "town hall"),
)  # fmt: skip
LANGUAGE_CODES = (
    "ar",
    "ca",
    "de",
    "el",
    "en",
    "es",
    "eu",
    "fr",
    "gl",
    "hi",
    "it",
    "ja",
    "ko",
    "nl",
    "pl",
    "pt",
    "ru",
    "sv",
    "tr",
    "zh",
)

# Fixed expressions: no slot
FIXED = (
    ("Hola.", "Hello."),
    ("¡Hola a todos!", "Hello, everyone!"),
    ("Buenos días a todos.", "Good morning, everyone."),
    ("Buenas tardes a todos.", "Good afternoon, everyone."),
    ("Buenas noches a todos.", "Good night, everyone."),
    ("¿Qué tal?", "How are you?"),
    ("¿Qué tal estás?", "How are you doing?"),
    ("¿Cómo estás?", "How are you?"),
    ("¿Cómo te va?", "How is it going?"),
    ("¿Cómo está usted?", "How are you?"),
    ("Muy bien, gracias.", "Very well, thank you."),
    ("Bien, ¿y tú?", "Fine, and you?"),
    ("Estoy bien, gracias.", "I am fine, thank you."),
    ("Gracias.", "Thank you."),
    ("Muchas gracias.", "Thank you very much."),
    ("Mil gracias.", "Thanks a lot."),
    ("Gracias por todo.", "Thank you for everything."),
    ("Gracias por venir.", "Thank you for coming."),
    ("No hay de qué.", "Don't mention it."),
    ("Por favor.", "Please."),
    ("Perdone.", "Excuse me."),
    ("Disculpe.", "Excuse me."),
    ("Con permiso.", "Excuse me."),
    ("Lo siento.", "I am sorry."),
    ("Lo siento, no lo sé.", "I am sorry, I don't know."),
    ("No lo sé.", "I don't know."),
    ("No entiendo.", "I don't understand."),
    ("¿Entiendes?", "Do you understand?"),
    ("Más despacio, por favor.", "More slowly, please."),
    ("¿Puede hablar más despacio?", "Can you speak more slowly?"),
    ("¿Qué significa esto?", "What does this mean?"),
    ("¿Cómo se dice esto en inglés?", "How do you say this in English?"),
    ("Adiós.", "Goodbye."),
    ("Hasta luego.", "See you later."),
    ("Hasta pronto.", "See you soon."),
    ("Hasta el lunes.", "See you on Monday."),
    ("Nos vemos.", "See you."),
    ("Nos vemos mañana.", "See you tomorrow."),
    ("Que tengas un buen día.", "Have a nice day."),
    ("Buen viaje.", "Have a good trip."),
    ("Buen provecho.", "Enjoy your meal."),
    ("¡Salud!", "Cheers!"),
    ("Mucho gusto.", "Pleased to meet you."),
    ("Encantada.", "Nice to meet you."),
    ("Bienvenido.", "Welcome."),
    ("Bienvenidos a Madrid.", "Welcome to Madrid."),
    ("Feliz cumpleaños.", "Happy birthday."),
    ("Feliz año nuevo.", "Happy New Year."),
    ("¡Felicidades!", "Congratulations!"),
    ("¡Enhorabuena!", "Congratulations!"),
    ("Buena suerte.", "Good luck."),
    ("¡Cuidado!", "Watch out!"),
    ("¡Socorro!", "Help!"),
    ("¡Fuego!", "Fire!"),
    ("Llame a la policía.", "Call the police."),
    ("Llame a un médico.", "Call a doctor."),
    ("Necesito ayuda.", "I need help."),
    ("¿Puede ayudarme?", "Can you help me?"),
    ("¿Me ayudas?", "Can you help me?"),
    ("Sí, claro.", "Yes, of course."),
    ("No, gracias.", "No, thank you."),
    ("Vale.", "Okay."),
    ("De acuerdo.", "All right."),
    ("No pasa nada.", "It doesn't matter."),
    ("No te preocupes.", "Don't worry."),
    ("Tienes razón.", "You are right."),
    ("Espera un momento.", "Wait a moment."),
    ("Un momento, por favor.", "One moment, please."),
    ("Ahora vuelvo.", "I'll be right back."),
    ("Ya voy.", "I'm coming."),
    ("¿Qué hora es ahora?", "What time is it now?"),
    ("¿Tienes hora?", "Do you have the time?"),
    ("Es tarde.", "It is late."),
    ("Es temprano.", "It is early."),
    ("Llegas tarde.", "You are late."),
    ("Perdón por llegar tarde.", "Sorry I am late."),
    ("¿Qué día es hoy?", "What day is it today?"),
    ("¿Cuánto cuesta?", "How much is it?"),
    ("¿Cuánto cuesta esto?", "How much does this cost?"),
    ("Es muy barato.", "It is very cheap."),
    ("¿Puedo pagar con tarjeta?", "Can I pay by card?"),
    ("Solo efectivo.", "Cash only."),
    ("La cuenta, por favor, camarero.", "The bill, please, waiter."),
    ("¿Qué quieres comer?", "What do you want to eat?"),
    ("¿Qué quieres beber?", "What do you want to drink?"),
    ("¿Está incluido el desayuno?", "Is breakfast included?"),
    ("Quisiera reservar una mesa.", "I would like to book a table."),
    ("¿Tienen mesa para cuatro?", "Do you have a table for four?"),
    ("¿Dónde están los servicios?", "Where are the toilets?"),
    ("¿Dónde vives?", "Where do you live?"),
    ("¿A qué te dedicas?", "What do you do?"),
    ("¿Cuántos años tienes?", "How old are you?"),
    ("¿Cómo se llama usted?", "What is your name?"),
    ("¿Cómo se llama tu hermano?", "What is your brother's name?"),
    ("¿Tienes hijos?", "Do you have children?"),
    ("¿Estás casado?", "Are you married?"),
    ("¿Tienes hermanos?", "Do you have any brothers or sisters?"),
    ("¿Cuántos hermanos tienes?", "How many brothers and sisters do you have?"),
    ("¿Cuántos hijos tienes?", "How many children do you have?"),
    ("Soy hijo único.", "I am an only child."),
    ("Soy hija única.", "I am an only child."),
    ("Estoy soltero.", "I am single."),
    ("¿Qué te pasa?", "What is wrong?"),
    ("¿Te gusta?", "Do you like it?"),
    ("Me encanta.", "I love it."),
    ("¿Vamos?", "Shall we go?"),
    ("¡Vamos!", "Let's go!"),
    ("¡Qué bonito!", "How beautiful!"),
    ("¡Qué rico!", "How delicious!"),
    ("¡Qué frío hace!", "It is so cold!"),
    ("¡Qué calor hace!", "It is so hot!"),
    ("Hace un día precioso.", "It is a beautiful day."),
    ("¿Qué tiempo hace hoy?", "What is the weather like today?"),
    ("¿Va a llover mañana?", "Is it going to rain tomorrow?"),
    ("Todo recto.", "Straight ahead."),
    ("A la derecha.", "On the right."),
    ("A la izquierda.", "On the left."),
    ("Está muy cerca.", "It is very close."),
    ("Está lejos de aquí.", "It is far from here."),
    ("¿Dónde estamos?", "Where are we?"),
    ("Me he perdido.", "I am lost."),
    ("¿Hay un cajero por aquí?", "Is there a cash machine around here?"),
    ("Quiero ir al centro.", "I want to go to the city centre."),
    ("Dos billetes, por favor.", "Two tickets, please."),
    ("Un billete de ida, por favor.", "A one-way ticket, please."),
    ("¿A qué hora llega el tren?", "What time does the train arrive?"),
    ("¿De qué andén sale el tren?", "Which platform does the train leave from?"),
    ("El vuelo se ha retrasado.", "The flight has been delayed."),
    ("He perdido el autobús.", "I have missed the bus."),
    ("No me encuentro bien.", "I don't feel well."),
    ("Estoy mareado.", "I feel dizzy."),
    ("Tengo fiebre.", "I have a fever."),
    ("Soy alérgico a los frutos secos.", "I am allergic to nuts."),
    ("Necesito una receta.", "I need a prescription."),
)


def _hour_words(hour: str) -> tuple[str, str]:
    """The article and the verb of a Spanish hour: "la una" and "es", "las dos" and "son"."""
    return ("la", "Es") if hour == "una" else ("las", "Son")


def _to(place: str, gender: str) -> str:
    """Spanish "to the place": "al museo", "a la playa"."""
    return "al " + place.split(" ", 1)[1] if gender == "m" else "a " + place


def _hour_phrases() -> list[tuple[str, str, str, str]]:
    """(Spanish "a las ..." form, Spanish "son las ..." form, English "at ...", English time),
    on the hour, half past, quarter past and quarter to."""
    phrases = []
    for index, (spanish, english) in enumerate(HOURS):
        article, verb = _hour_words(spanish)
        following_spanish, following_english = HOURS[(index + 1) % len(HOURS)]
        following_article, following_verb = _hour_words(following_spanish)
        phrases += [
            (
                f"a {article} {spanish}",
                f"{verb} {article} {spanish}",
                f"at {english}",
                f"It is {english} o'clock",
            ),
            (
                f"a {article} {spanish} y media",
                f"{verb} {article} {spanish} y media",
                f"at half past {english}",
                f"It is half past {english}",
            ),
            (
                f"a {article} {spanish} y cuarto",
                f"{verb} {article} {spanish} y cuarto",
                f"at quarter past {english}",
                f"It is quarter past {english}",
            ),
            (
                f"a {following_article} {following_spanish} menos cuarto",
                f"{following_verb} {following_article} {following_spanish} menos cuarto",
                f"at quarter to {following_english}",
                f"It is quarter to {following_english}",
            ),
        ]
    return phrases


def _day_parts(hour: int) -> list[tuple[str, str]]:
    """The parts of the day an hour (1-11) is said with, in both languages: Spanish says "de
    la mañana" from six to eleven, "de la tarde" from one to seven, "de la noche" from eight;
    English has the afternoon end at six and the night begin at ten."""
    parts = []
    if 6 <= hour <= 11:
        parts.append(("de la mañana", "in the morning"))
    if hour <= 7:
        parts.append(("de la tarde", "in the afternoon" if hour <= 5 else "in the evening"))
    if hour >= 8:
        parts.append(("de la noche", "in the evening" if hour <= 9 else "at night"))
    return parts


def _day_time_pairs() -> list[tuple[str, str]]:
    """Hours with the part of the day: "a las ocho de la mañana" is "at eight in the
    morning", not "at the eight of the morning"."""
    pairs = []
    for index, (spanish, english) in enumerate(HOURS):
        hour = index + 1
        if hour == 12:  # "las doce de la tarde" is noon, said otherwise in English
            continue
        article, verb = _hour_words(spanish)
        for part, part_english in _day_parts(hour):
            for at_es, at_en in (
                (f"a {article} {spanish} {part}", f"at {english} {part_english}"),
                (f"a {article} {spanish} y media {part}", f"at half past {english} {part_english}"),
            ):
                pairs += [
                    (f"Nos vemos {at_es}.", f"See you {at_en}."),
                    (f"El tren sale {at_es}.", f"The train leaves {at_en}."),
                    (f"El autobús llega {at_es}.", f"The bus arrives {at_en}."),
                    (f"La tienda abre {at_es}.", f"The shop opens {at_en}."),
                    (f"Me levanto {at_es}.", f"I get up {at_en}."),
                ]
            pairs.append(
                (f"{verb} {article} {spanish} {part}.", f"It is {english} {part_english}.")
            )
    return pairs


def _kin_pairs() -> list[tuple[str, str]]:
    """How many brothers, daughters or cousins one has: Spanish "tener" is "have" here, not
    "be" as in "Tengo hambre"."""
    pairs = []
    for relation in KIN:
        for (singular, singular_english), one in zip(relation, ("un", "una"), strict=True):
            plural = singular + "s"
            english_plural = "children" if plural == "hijos" else singular_english + "s"
            pairs += [
                (f"Tengo {one} {singular}.", f"I have a {singular_english}."),
                (f"No tengo {plural}.", f"I don't have any {english_plural}."),
                (f"¿Tienes {plural}?", f"Do you have any {english_plural}?"),
            ]
            for count, count_english in COUNTS:
                pairs += [
                    (f"Tengo {count} {plural}.", f"I have {count_english} {english_plural}."),
                    (
                        f"Mi madre tiene {count} {plural}.",
                        f"My mother has {count_english} {english_plural}.",
                    ),
                    (
                        f"Mis {count} {plural} viven en Madrid.",
                        f"My {count_english} {english_plural} live in Madrid.",
                    ),
                ]
    # "dos hermanos y una hermana"; not "primos y una prima", both cousins in English
    for (male, male_english), (female, female_english) in KIN:
        if male_english == female_english:
            continue
        for many, many_english, one, other, other_english in (
            (male, male_english, "una", female, female_english),
            (female, female_english, "un", male, male_english),
        ):
            for count, count_english in COUNTS[:3]:
                pairs.append(
                    (
                        f"Tengo {count} {many}s y {one} {other}.",
                        f"I have {count_english} {many_english}s and a {other_english}.",
                    )
                )
    return pairs


def _greeting_pairs() -> list[tuple[str, str]]:
    """A greeting and "how are you?" in one sentence, alone and with a name."""
    pairs = []
    for greeting, greeting_english in GREETINGS:
        for question, question_english in HOW_ARE_YOU:
            pairs.append((f"{greeting}, {question}", f"{greeting_english}, {question_english}"))
            for name in NAMES_FEMININE[::2] + NAMES_MASCULINE[::2]:
                pairs.append(
                    (
                        f"{greeting}, {name}, {question}",
                        f"{greeting_english}, {name}, {question_english}",
                    )
                )
    return pairs


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _time_pairs() -> list[tuple[str, str]]:
    pairs = []
    for at_es, is_es, at_en, is_en in _hour_phrases():
        pairs += [
            (f"{is_es}.", f"{is_en}."),
            (f"Nos vemos {at_es}.", f"See you {at_en}."),
            (f"El tren sale {at_es}.", f"The train leaves {at_en}."),
            (f"La reunión es {at_es}.", f"The meeting is {at_en}."),
            (f"Cenamos {at_es}.", f"We have dinner {at_en}."),
            (f"Me levanto {at_es}.", f"I get up {at_en}."),
        ]
    for day, days, english in DAYS:
        pairs += [
            (f"Hoy es {day}.", f"Today is {english}."),
            (f"Mañana es {day}.", f"Tomorrow is {english}."),
            (f"Ayer fue {day}.", f"Yesterday was {english}."),
            (f"Nos vemos el {day}.", f"See you on {english}."),
            (f"Trabajo los {days}.", f"I work on {english}s."),
            (f"El museo cierra los {days}.", f"The museum is closed on {english}s."),
            (f"La fiesta es el {day} por la noche.", f"The party is on {english} night."),
            (f"Vuelvo el {day} por la mañana.", f"I am coming back on {english} morning."),
            (f"¿Estás libre el {day}?", f"Are you free on {english}?"),
        ]
    for month, english in MONTHS:
        pairs += [
            (f"Mi cumpleaños es en {month}.", f"My birthday is in {english}."),
            (f"Nos vamos de vacaciones en {month}.", f"We are going on holiday in {english}."),
            (f"Volvemos en {month}.", f"We are coming back in {english}."),
        ]
    for age in AGES:
        pairs += [
            (f"Tengo {age} años.", f"I am {age} years old."),
            (f"Mi abuela tiene {age} años.", f"My grandmother is {age} years old."),
        ]
    return pairs


def _people_pairs(countries: list[tuple[str, str]], languages: list[tuple[str, str]]):
    pairs = []
    for name in NAMES_FEMININE + NAMES_MASCULINE:
        pairs += [
            (f"Hola, {name}.", f"Hello, {name}."),
            (f"Buenos días, {name}.", f"Good morning, {name}."),
            (f"Buenas tardes, {name}.", f"Good afternoon, {name}."),
            (f"Buenas noches, {name}.", f"Good night, {name}."),
            (f"Hasta mañana, {name}.", f"See you tomorrow, {name}."),
            (f"Adiós, {name}.", f"Goodbye, {name}."),
            (f"Gracias, {name}.", f"Thank you, {name}."),
            (f"Me llamo {name}.", f"My name is {name}."),
            (f"Te presento a {name}.", f"This is {name}."),
            (f"¿Dónde está {name}?", f"Where is {name}?"),
        ]
    for name in NAMES_FEMININE:
        pairs.append((f"Mi hermana se llama {name}.", f"My sister's name is {name}."))
    for name in NAMES_MASCULINE:
        pairs.append((f"Mi amigo se llama {name}.", f"My friend's name is {name}."))
    people = NAMES_FEMININE + NAMES_MASCULINE
    for index, (spanish, english) in enumerate(countries):
        name = people[index % len(people)]
        pairs += [
            (f"Soy de {spanish}.", f"I am from {english}."),
            (f"Somos de {spanish}.", f"We are from {english}."),
            (f"¿Eres de {spanish}?", f"Are you from {english}?"),
            (f"Vivo en {spanish}.", f"I live in {english}."),
            (f"{name} es de {spanish}.", f"{name} is from {english}."),
            (f"Nunca he estado en {spanish}.", f"I have never been to {english}."),
        ]
    for spanish, english in languages:
        pairs += [
            (f"¿Hablas {spanish}?", f"Do you speak {english}?"),
            (f"¿Habla usted {spanish}?", f"Do you speak {english}?"),
            (f"Hablo {spanish}.", f"I speak {english}."),
            (f"No hablo {spanish}.", f"I don't speak {english}."),
            (f"Hablo un poco de {spanish}.", f"I speak a little {english}."),
            (f"Estoy aprendiendo {spanish}.", f"I am learning {english}."),
            (f"¿Cómo se dice «gracias» en {spanish}?", f'How do you say "thank you" in {english}?'),
        ]
    for spanish, english, gender in FAMILY:
        this = "Este es" if gender == "m" else "Esta es"
        pairs += [
            (f"{this} mi {spanish}.", f"This is my {english}."),
            (f"Mi {spanish} vive cerca.", f"My {english} lives nearby."),
            (f"Voy a visitar a mi {spanish}.", f"I am going to visit my {english}."),
            (f"¿Cómo está tu {spanish}?", f"How is your {english}?"),
            (f"Mi {spanish} trabaja mucho.", f"My {english} works a lot."),
        ]
        for state, state_english in STATES[:6]:
            agreeing = state if gender == "m" else spanish_feminine(state)
            pairs.append((f"Mi {spanish} está {agreeing}.", f"My {english} is {state_english}."))
    return pairs


def _feeling_pairs() -> list[tuple[str, str]]:
    pairs = []
    for spanish, english in STATES:
        for form in dict.fromkeys((spanish, spanish_feminine(spanish))):
            pairs += [
                (f"Estoy {form}.", f"I am {english}."),
                (f"Estoy muy {form}.", f"I am very {english}."),
                (f"¿Estás {form}?", f"Are you {english}?"),
                (f"No estoy {form}.", f"I am not {english}."),
            ]
        pairs.append((f"Estamos {spanish}s.", f"We are {english}."))
    for noun, english, gender in FEELINGS:
        much = "mucho" if gender == "m" else "mucha"
        very = "really" if " " in english else "very"
        pairs += [
            (f"Tengo {noun}.", f"I am {english}."),
            (f"Tengo {much} {noun}.", f"I am {very} {english}."),
            (f"¿Tienes {noun}?", f"Are you {english}?"),
            (f"No tengo {noun}.", f"I am not {english}."),
            (f"Los niños tienen {noun}.", f"The children are {english}."),
        ]
    for part, english in BODY:
        pairs += [
            (f"Me duele {part}.", f"My {english} hurts."),
            (f"Me duele mucho {part}.", f"My {english} hurts a lot."),
            (f"¿Te duele {part}?", f"Does your {english} hurt?"),
            (f"Me he hecho daño en {part}.", f"I have hurt my {english}."),
        ]
    for spanish, english in WEATHER:
        for when, when_english in WHEN:
            pairs.append((f"{_capital(when)} {spanish}.", f"{_capital(english)} {when_english}."))
        pairs.append((f"{_capital(spanish)}.", f"{_capital(english)}."))
    for spanish, english in WEATHER_NOW:
        pairs.append((f"{spanish}.", f"{english}."))
        pairs.append((f"{spanish} en Madrid.", f"{english} in Madrid."))
    return pairs


def _place_pairs() -> list[tuple[str, str]]:
    pairs = []
    for spanish, gender, english in PLACES:
        to = _to(spanish, gender)
        of = "del " + spanish.split(" ", 1)[1] if gender == "m" else "de " + spanish
        pairs += [
            (f"¿Cómo llego {to}?", f"How do I get to the {english}?"),
            (f"¿Está lejos {spanish}?", f"Is the {english} far?"),
            (f"{_capital(spanish)} está a la derecha.", f"The {english} is on the right."),
            (f"{_capital(spanish)} está a la izquierda.", f"The {english} is on the left."),
            (f"Vamos {to}.", f"Let's go to the {english}."),
            (f"Voy {to} mañana.", f"I am going to the {english} tomorrow."),
            (f"Estoy cerca {of}.", f"I am near the {english}."),
            (f"Gire a la derecha después {of}.", f"Turn right after the {english}."),
            (f"{_capital(spanish)} abre a las nueve.", f"The {english} opens at nine."),
            (
                f"{_capital(spanish)} está cerrado hoy."
                if gender == "m"
                else f"{_capital(spanish)} está cerrada hoy.",
                f"The {english} is closed today.",
            ),
        ]
    return pairs


def _plan_pairs() -> list[tuple[str, str]]:
    """Where one will go and when, the time first or last, alone or with company: for each
    place every way of going once, the times and the company taken in turn."""
    pairs = []
    turn = 0
    for spanish, gender, english in PLACES:
        to = _to(spanish, gender)
        for going, going_english in GOING:
            when, when_english = WHEN_FIRST[turn % len(WHEN_FIRST)]
            company, company_english = COMPANY[turn % len(COMPANY)]
            later, later_english = WHEN_FIRST[(turn + 3) % len(WHEN_FIRST)]
            turn += 1
            subject = _capital(going_english)
            first, first_english = _capital(when), _capital(when_english)
            pairs += [
                (f"{first} {going} {to}.", f"{first_english} {going_english} to the {english}."),
                (
                    f"{first} {going} {to} con {company}.",
                    f"{first_english} {going_english} to the {english} with {company_english}.",
                ),
                (
                    f"{_capital(going)} {to} {later}.",
                    f"{subject} to the {english} {later_english}.",
                ),
            ]
    return pairs


def _people_named_pairs() -> list[tuple[str, str]]:
    pairs = []
    for spanish, english in PEOPLES:
        pairs += [
            (f"Los {spanish} llegaron ayer.", f"The {english} arrived yesterday."),
            (f"Es la historia de los {spanish}.", f"It is the history of the {english}."),
            (f"Hablamos con los {spanish}.", f"We spoke with the {english}."),
            (f"¿Dónde viven los {spanish}?", f"Where do the {english} live?"),
        ]
    return pairs


def expression_pairs(
    countries: Iterable[tuple[str, str]], languages: Iterable[tuple[str, str]]
) -> list[tuple[str, str]]:
    """Every expression of this module, its slots filled from the lists above and from
    `countries` and `languages` ((Spanish, English) names, e.g. CLDR's); deduplicated."""
    countries = [(s, e) for s, e in countries if " " not in s and " " not in e]
    languages = list(languages)
    pairs = list(FIXED) + _time_pairs() + _day_time_pairs() + _people_pairs(countries, languages)
    pairs += _kin_pairs() + _greeting_pairs() + _plan_pairs() + _people_named_pairs()
    pairs += _feeling_pairs() + _place_pairs()
    return list(dict.fromkeys(pairs))
