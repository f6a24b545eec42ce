"""Template banks for scripts/make_demo_traffic.py (synthetic text in en/es/fr).

Natural-language data, so long lines are allowed here (E501 is off for this file).

Plain data only: `str.format` placeholders are filled by the generator from computed facts.
"""
# ruff: noqa: E501

NAMES = {
    "en": ["Emma", "Liam", "Olivia", "Noah", "Ava", "Mason", "Sophia", "Ethan", "Mia", "Lucas",
           "Harper", "James", "Chloe", "Daniel", "Grace", "Henry"],
    "es": ["Lucía", "Mateo", "Sofía", "Hugo", "Martina", "Pablo", "Valeria", "Diego", "Carmen",
           "Javier", "Elena", "Andrés"],
    "fr": ["Camille", "Louis", "Chloé", "Hugo", "Léa", "Gabriel", "Manon", "Arthur", "Inès", "Jules",
           "Zoé", "Théo"],
}
SURNAMES = ["Smith", "Garcia", "Martin", "Nguyen", "Dubois", "López", "Brown", "Moreau", "Kim",
            "Rossi", "Fernández", "Lefèvre", "Walsh", "Okafor"]
CITIES = {  # fr cities start with a consonant so "de {city}" stays correct
    "en": ["Boston", "Denver", "Seattle", "Austin", "Chicago", "Portland", "Toronto", "Dublin"],
    "es": ["Madrid", "Sevilla", "Valencia", "Bilbao", "Bogotá", "Lima", "Monterrey", "Zaragoza"],
    "fr": ["Lyon", "Nantes", "Lille", "Bordeaux", "Toulouse", "Marseille", "Montréal", "Rennes"],
}
MONTHS = {
    "en": ["January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December"],
    "es": ["enero", "febrero", "marzo", "abril", "mayo", "junio", "julio", "agosto", "septiembre",
           "octubre", "noviembre", "diciembre"],
    "fr": ["janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août", "septembre",
           "octobre", "novembre", "décembre"],
}
EMAIL_DOMAINS = ["example.com", "example.org", "mail.example.net", "example.fr"]
PHONE_FORMATS = {  # '#' = random digit
    "en": ["+1 415 555 01##", "(415) 555-01##", "+1 212 555 01##", "646-555-01##"],
    "es": ["+34 6## ### ###", "+34 91 ### ## ##"],
    "fr": ["+33 6 ## ## ## ##", "06 ## ## ## ##", "+33 1 ## ## ## ##"],
}
MODEL_NAMES = ["Air", "Pro", "Mini", "One", "Max"]
BRANDS = ["Nimbus", "Brightwave", "Orbitel", "Lumio", "Parcelo", "Kestrel Home"]
PLANS = ["Basic", "Plus", "Pro", "Family", "Business"]
# all masculine / consonant-initial so articles and possessives need no agreement
PRODUCTS = [
    {"en": "Wi-Fi router", "es": "router Wi-Fi", "fr": "routeur Wi-Fi",
     "pl": {"en": "Wi-Fi routers", "es": "routers Wi-Fi", "fr": "routeurs Wi-Fi"}},
    {"en": "smart speaker", "es": "altavoz inteligente", "fr": "haut-parleur connecté",
     "pl": {"en": "smart speakers", "es": "altavoces inteligentes", "fr": "haut-parleurs connectés"}},
    {"en": "robot vacuum", "es": "robot aspirador", "fr": "robot aspirateur",
     "pl": {"en": "robot vacuums", "es": "robots aspiradores", "fr": "robots aspirateurs"}},
    {"en": "smart thermostat", "es": "termostato inteligente", "fr": "thermostat connecté",
     "pl": {"en": "smart thermostats", "es": "termostatos inteligentes", "fr": "thermostats connectés"}},
    {"en": "wireless headset", "es": "auricular inalámbrico", "fr": "casque sans fil",
     "pl": {"en": "wireless headsets", "es": "auriculares inalámbricos", "fr": "casques sans fil"}},
    {"en": "phone", "es": "teléfono", "fr": "téléphone", "pl": {"en": "phones", "es": "teléfonos", "fr": "téléphones"}},
]

# ---------------------------------------------------------------- math
ITEMS = [("apples", "manzanas", "pommes"), ("notebooks", "cuadernos", "cahiers"),
         ("pencils", "lápices", "crayons"), ("cupcakes", "magdalenas", "gâteaux"),
         ("stickers", "pegatinas", "autocollants"), ("marbles", "canicas", "billes"),
         ("oranges", "naranjas", "oranges"), ("books", "libros", "livres"),
         ("cookies", "galletas", "biscuits"), ("seashells", "conchas", "coquillages")]
PRICED = [("a jacket", "una chaqueta", "une veste"), ("a bike", "una bicicleta", "un vélo"),
          ("a desk lamp", "una lámpara", "une lampe"), ("a pair of boots", "unas botas", "des bottes"),
          ("a guitar", "una guitarra", "une guitare"), ("a backpack", "una mochila", "un sac à dos")]
LANG_INDEX = {"en": 0, "es": 1, "fr": 2}

MATH = {
    "change": {
        "en": {"q": ["{name} buys {a} {item} at {p_m} each and pays with a {bill_m} bill. How much change does {name} get back?",
                     "At the market, {name} picks up {a} {item} that cost {p_m} apiece and hands the cashier {bill_m}. What is the change?"],
               "a": "First find the cost: {a} × {p} = {total}. Then subtract it from the money given: {bill} - {total} = {change}. {name} gets {change_m} back. The answer is {change}."},
        "es": {"q": ["{name} compra {a} {item} a {p_m} la unidad y paga con un billete de {bill_m}. ¿Cuánto le devuelven?"],
               "a": "Primero calculamos el coste: {a} × {p} = {total}. Luego restamos: {bill} - {total} = {change}. A {name} le devuelven {change_m}. La respuesta es {change}."},
        "fr": {"q": ["{name} achète {a} {item} à {p_m} l'unité et paie avec un billet de {bill_m}. Combien lui rend-on ?"],
               "a": "On calcule d'abord le prix total : {a} × {p} = {total}. Puis on soustrait : {bill} - {total} = {change}. On rend {change_m} à {name}. La réponse est {change}."},
    },
    "share": {
        "en": {"q": ["{name} has {total} {item} and shares them equally among {k} friends. How many {item} does each friend get?",
                     "A teacher splits {total} {item} evenly between {k} groups. How many {item} does each group receive?"],
               "a": "We divide the {item} equally: {total} ÷ {k} = {each}. Each one gets {each} {item}, with nothing left over. The answer is {each}."},
        "es": {"q": ["{name} reparte {total} {item} a partes iguales entre {k} amigos. ¿Qué cantidad de {item} recibe cada amigo?"],
               "a": "Dividimos en partes iguales: {total} ÷ {k} = {each}. Cada amigo recibe {each} {item} y no sobra nada. La respuesta es {each}."},
        "fr": {"q": ["{name} partage {total} {item} équitablement entre {k} amis. Combien de {item} chaque ami reçoit-il ?"],
               "a": "On divise : {total} ÷ {k} = {each}. Chaque ami reçoit {each} {item}, sans reste. La réponse est {each}."},
    },
    "trip": {
        "en": {"q": ["A bus travels at {v1} km/h for {t1} hours, then at {v2} km/h for {t2} hours. How many kilometres does it cover in total?",
                     "{name} drives {t1} hours at {v1} km/h and then {t2} hours at {v2} km/h. What is the total distance in km?"],
               "a": "First leg: {v1} × {t1} = {d1} km. Second leg: {v2} × {t2} = {d2} km. Total: {d1} + {d2} = {total} km. The answer is {total}."},
        "es": {"q": ["Un autobús viaja a {v1} km/h durante {t1} horas y después a {v2} km/h durante {t2} horas. ¿Cuántos kilómetros recorre en total?"],
               "a": "Primer tramo: {v1} × {t1} = {d1} km. Segundo tramo: {v2} × {t2} = {d2} km. En total: {d1} + {d2} = {total} km. La respuesta es {total}."},
        "fr": {"q": ["Un bus roule à {v1} km/h pendant {t1} heures, puis à {v2} km/h pendant {t2} heures. Quelle distance parcourt-il au total ?"],
               "a": "Première partie : {v1} × {t1} = {d1} km. Deuxième partie : {v2} × {t2} = {d2} km. Au total : {d1} + {d2} = {total} km. La réponse est {total}."},
    },
    "reading": {
        "en": {"q": ["{name}'s book has {n} pages. {name} has already read {r} pages and reads {p} pages a day. How many more days will it take to finish?"],
               "a": "Pages left: {n} - {r} = {left}. At {p} pages a day: {left} ÷ {p} = {d} days. The answer is {d}."},
        "es": {"q": ["El libro de {name} tiene {n} páginas. Ya ha leído {r} y lee {p} páginas al día. ¿Cuántos días le faltan para terminarlo?"],
               "a": "Páginas que faltan: {n} - {r} = {left}. A {p} páginas por día: {left} ÷ {p} = {d} días. La respuesta es {d}."},
        "fr": {"q": ["Le livre de {name} fait {n} pages. {name} en a déjà lu {r} et lit {p} pages par jour. Combien de jours faut-il encore pour le finir ?"],
               "a": "Pages restantes : {n} - {r} = {left}. À {p} pages par jour : {left} ÷ {p} = {d} jours. La réponse est {d}."},
    },
    "discount": {
        "en": {"q": ["{name} wants to buy {thing} that costs {P_m}. The store offers {d}% off this week. How much will {name} pay?",
                     "The regular price of {thing} is {P_m}, and it is on sale for {d}% off. What is the sale price?"],
               "a": "The discount is {d}% of {P}: {P} × {d} ÷ 100 = {saving}. The sale price is {P} - {saving} = {final}. The answer is {final}."},
        "es": {"q": ["{name} quiere comprar {thing} que cuesta {P_m}. La tienda ofrece un {d} % de descuento. ¿Cuánto pagará?"],
               "a": "El descuento es el {d} % de {P}: {P} × {d} ÷ 100 = {saving}. El precio final es {P} - {saving} = {final}. La respuesta es {final}."},
        "fr": {"q": ["{name} veut acheter {thing} qui coûte {P_m}. Le magasin fait une remise de {d} %. Quel est le prix à payer ?"],
               "a": "La remise vaut {d} % de {P} : {P} × {d} ÷ 100 = {saving}. Le prix final est {P} - {saving} = {final}. La réponse est {final}."},
    },
    "collect": {
        "en": {"q": ["{name} had {a} {item}. {name} gave {b} to a friend and then bought {c} packs with {per} {item} in each. How many {item} does {name} have now?"],
               "a": "After giving some away: {a} - {b} = {x1}. The new packs add {c} × {per} = {x2}. Total: {x1} + {x2} = {res}. The answer is {res}."},
        "es": {"q": ["{name} tenía {a} {item}. Le dio {b} a un amigo y después compró {c} paquetes de {per} {item} cada uno. ¿Qué cantidad de {item} tiene ahora?"],
               "a": "Después de regalar: {a} - {b} = {x1}. Los paquetes nuevos suman {c} × {per} = {x2}. En total: {x1} + {x2} = {res}. La respuesta es {res}."},
        "fr": {"q": ["{name} avait {a} {item}. {name} en a donné {b} à un ami, puis a acheté {c} paquets de {per} {item}. Combien de {item} possède {name} maintenant ?"],
               "a": "Après le don : {a} - {b} = {x1}. Les nouveaux paquets apportent {c} × {per} = {x2}. Total : {x1} + {x2} = {res}. La réponse est {res}."},
    },
    "savings": {
        "en": {"q": ["{name} saves {s_m} every week for {w} weeks, then spends {x_m} on a gift. How much money is left?"],
               "a": "Savings: {s} × {w} = {saved}. After the gift: {saved} - {x} = {left}. {name} has {left_m} left. The answer is {left}."},
        "es": {"q": ["{name} ahorra {s_m} cada semana durante {w} semanas y luego gasta {x_m} en un regalo. ¿Cuánto dinero le queda?"],
               "a": "Ahorro: {s} × {w} = {saved}. Después del regalo: {saved} - {x} = {left}. Le quedan {left_m}. La respuesta es {left}."},
        "fr": {"q": ["{name} économise {s_m} chaque semaine pendant {w} semaines, puis dépense {x_m} pour un cadeau. Combien d'argent reste-t-il ?"],
               "a": "Économies : {s} × {w} = {saved}. Après le cadeau : {saved} - {x} = {left}. Il reste {left_m}. La réponse est {left}."},
    },
}
MATH_WRAP = {
    "en": ["{q}", "Solve step by step: {q}", "Can you help my kid with this homework problem? {q}",
           "{q} Please show your work.", "Word problem: {q}", "{q} Explain briefly."],
    "es": ["{q}", "Resuelve paso a paso: {q}", "¿Me ayudas con este problema de mi hijo? {q}", "{q} Explica los pasos."],
    "fr": ["{q}", "Résous étape par étape : {q}", "Tu peux m'aider avec cet exercice ? {q}", "{q} Détaille le calcul."],
}
MATH_OUTRO = {  # inserted just before the final "The answer is N." sentence
    "en": ["", "", "Each step uses only the numbers given in the problem.", "You can double-check by working backwards from the result.",
           "Writing each step down like this makes mistakes easy to spot."],
    "es": ["", "", "Se puede comprobar haciendo la operación al revés.", "Cada paso usa solo los datos del enunciado."],
    "fr": ["", "", "On peut vérifier en refaisant le calcul à l'envers.", "Chaque étape n'utilise que les données de l'énoncé."],
}
MATH_INTRO = {
    "en": ["", "Let's solve it step by step. ", "Sure! ", "Here's how to work it out. ", "Good question. "],
    "es": ["", "Vamos paso a paso. ", "¡Claro! ", "Así se resuelve. "],
    "fr": ["", "Procédons étape par étape. ", "Bien sûr ! ", "Voici le raisonnement. "],
}

# ---------------------------------------------------------------- summarize
SUMMARIZE = {
    "earnings": {
        "en": {"p": "{company}, the {city}-based consumer electronics maker, reported revenue of ${revenue} million for the {quarter}, up {growth}% from a year earlier. Executives credited strong demand for its {product}, which now account for nearly half of sales. The company also said it plans to hire {hires} engineers over the next year and to open a second office. Analysts had expected slower growth because of weaker consumer spending, but the shares rose {move}% in early trading after the announcement. Management kept its full-year outlook unchanged.",
               "s": ["{company} grew {quarter} revenue {growth}% to ${revenue} million on strong demand for its {product}, plans to hire {hires} engineers, and kept its full-year outlook.",
                     "Revenue at {company} rose {growth}% year over year to ${revenue} million in the {quarter}, beating expectations; the shares gained {move}% and the company will hire {hires} engineers."]},
        "es": {"p": "{company}, fabricante de electrónica de consumo con sede en {city}, registró unos ingresos de {revenue} millones de euros en el {quarter}, un {growth} % más que hace un año. La dirección atribuye el resultado a la fuerte demanda de su gama de {product}, que ya supone casi la mitad de las ventas. La empresa prevé contratar a {hires} ingenieros durante el próximo año y abrir una segunda oficina. Los analistas esperaban un crecimiento menor por la debilidad del consumo, pero las acciones subieron un {move} % tras el anuncio.",
               "s": ["{company} aumentó sus ingresos un {growth} % en el {quarter}, hasta {revenue} millones de euros, gracias a su gama de {product}, y contratará a {hires} ingenieros.",
                     "Los ingresos de {company} crecieron un {growth} % ({revenue} millones de euros) por encima de lo previsto; las acciones subieron un {move} %."]},
        "fr": {"p": "{company}, fabricant d'électronique grand public basé à {city}, a publié un chiffre d'affaires de {revenue} millions d'euros pour le {quarter}, en hausse de {growth} % sur un an. La direction attribue cette performance à la forte demande pour sa gamme de {product}, qui représente désormais près de la moitié des ventes. L'entreprise prévoit de recruter {hires} ingénieurs l'an prochain et d'ouvrir un second bureau. Les analystes attendaient une croissance plus faible, mais l'action a gagné {move} % après l'annonce.",
               "s": ["{company} a vu son chiffre d'affaires progresser de {growth} % au {quarter}, à {revenue} millions d'euros, grâce à sa gamme de {product} ; {hires} ingénieurs seront recrutés.",
                     "Croissance meilleure que prévu pour {company} : +{growth} % à {revenue} millions d'euros, et une action en hausse de {move} %."]},
    },
    "council": {
        "en": {"p": "On Tuesday the {city} city council voted {yes} to {no} to approve {project}. The plan will cost about ${budget} million, funded partly by a regional grant. Supporters argued that it will make the city centre safer and more attractive, while opponents worried about the loss of parking spaces and the impact on local shops. Construction is expected to start in {month} and to take roughly {duration} months. The council will publish detailed maps for public comment next week.",
               "s": ["{city}'s council approved {project} by a {yes}-{no} vote; the ${budget} million project starts in {month} and should take about {duration} months.",
                     "By {yes} votes to {no}, {city} approved {project} costing about ${budget} million, with construction starting in {month} despite concerns about parking and local shops."]},
        "es": {"p": "El martes, el ayuntamiento de {city} aprobó por {yes} votos a favor y {no} en contra {project}. El plan costará unos {budget} millones de euros, financiados en parte con una subvención regional. Sus defensores aseguran que hará el centro más seguro y atractivo, mientras que los críticos temen la pérdida de plazas de aparcamiento y el impacto en el comercio local. Las obras comenzarán en {month} y durarán unos {duration} meses.",
               "s": ["{city} aprobó {project} por {yes} votos a {no}; costará {budget} millones de euros y las obras empiezan en {month}.",
                     "El ayuntamiento de {city} dio luz verde a {project} ({budget} millones de euros) pese a las críticas por el aparcamiento; las obras durarán unos {duration} meses."]},
        "fr": {"p": "Mardi, le conseil municipal de {city} a approuvé par {yes} voix contre {no} {project}. Le projet coûtera environ {budget} millions d'euros, financés en partie par une subvention régionale. Ses partisans estiment qu'il rendra le centre-ville plus sûr et plus agréable, tandis que ses opposants redoutent la suppression de places de stationnement et l'impact sur les commerces. Les travaux doivent commencer en {month} et durer environ {duration} mois.",
               "s": ["{city} a approuvé {project} par {yes} voix contre {no} ; les travaux, estimés à {budget} millions d'euros, débuteront en {month}.",
                     "Le conseil municipal de {city} a validé {project} ({budget} millions d'euros) malgré les craintes des commerçants ; le chantier durera environ {duration} mois."]},
    },
    "storm": {
        "en": {"p": "A powerful storm swept through {city} overnight, dropping {rain} millimetres of rain in just {hours} hours. Wind gusts reached {wind} km/h, knocking down trees and leaving about {outages} households without power. Authorities closed {schools} schools as a precaution and urged residents to avoid unnecessary travel. Crews expect to restore electricity to most homes by tomorrow evening, and no serious injuries have been reported.",
               "s": ["A storm hit {city} with {rain} mm of rain and {wind} km/h gusts, cutting power to about {outages} households and closing {schools} schools; no serious injuries were reported.",
                     "{city} got {rain} mm of rain in {hours} hours overnight; about {outages} homes lost power and {schools} schools closed, with electricity expected back by tomorrow evening."]},
        "es": {"p": "Una fuerte tormenta azotó {city} durante la noche y dejó {rain} litros por metro cuadrado en solo {hours} horas. Las rachas de viento alcanzaron los {wind} km/h, derribaron árboles y dejaron sin luz a unos {outages} hogares. Las autoridades cerraron {schools} colegios como precaución y pidieron evitar los desplazamientos innecesarios. Se espera restablecer el suministro mañana por la tarde y no hay heridos graves.",
               "s": ["Una tormenta con {rain} l/m² y rachas de {wind} km/h dejó sin luz a unos {outages} hogares en {city} y obligó a cerrar {schools} colegios; no hay heridos graves.",
                     "{city} sufrió una fuerte tormenta nocturna: unos {outages} hogares sin electricidad y {schools} colegios cerrados, con el suministro previsto para mañana."]},
        "fr": {"p": "Une violente tempête a frappé {city} dans la nuit, avec {rain} millimètres de pluie en seulement {hours} heures. Les rafales ont atteint {wind} km/h, abattant des arbres et privant d'électricité environ {outages} foyers. Les autorités ont fermé {schools} écoles par précaution et appellent à limiter les déplacements. Le courant devrait être rétabli dans la plupart des foyers demain soir, et aucun blessé grave n'est à déplorer.",
               "s": ["Une tempête a frappé {city} ({rain} mm de pluie, rafales à {wind} km/h) : environ {outages} foyers privés d'électricité et {schools} écoles fermées, sans blessé grave.",
                     "À {city}, une tempête nocturne a privé environ {outages} foyers de courant et entraîné la fermeture de {schools} écoles ; le courant devrait revenir demain soir."]},
    },
    "launch": {
        "en": {"p": "{company} on Thursday unveiled the {model}, a {product} priced at ${price}. The device offers {feature1} and {feature2}, and the company claims battery life of up to {battery} hours. Pre-orders open today, with shipping planned for {month}. Reviewers who tried early units praised the design but noted that the companion app still lacks several promised features, including multi-room support.",
               "s": ["{company} announced the {model}, a ${price} {product} with {feature1} and up to {battery} hours of battery life, shipping in {month}.",
                     "The new {model} from {company} costs ${price}, ships in {month} and offers {feature1}; early reviewers liked the design but found the app incomplete."]},
    },
    "study": {
        "en": {"p": "Researchers at the University of {city} followed {n} adults for {years} years to study the link between {habit} and {outcome}. Participants who {habit_do} were {pct}% less likely to {outcome_verb} than those who did not, even after adjusting for age and income. The authors caution that the study was observational and cannot prove cause and effect. They now plan a randomised trial with {n2} volunteers, starting next spring.",
               "s": ["A {years}-year study of {n} adults at the University of {city} found that people who {habit_do} were {pct}% less likely to {outcome_verb}, though it cannot prove causation.",
                     "Observational research on {n} adults links {habit} to a {pct}% lower risk of {outcome}; a randomised trial with {n2} volunteers is planned."]},
    },
}
QUARTERS = {"en": ["first quarter", "second quarter", "third quarter"],
            "es": ["primer trimestre", "segundo trimestre", "tercer trimestre"],
            "fr": ["premier trimestre", "deuxième trimestre", "troisième trimestre"]}
PROJECTS = {"en": ["a network of protected bike lanes", "a new public library", "a riverside park"],
            "es": ["una red de carriles bici protegidos", "una nueva biblioteca pública", "un parque junto al río"],
            "fr": ["un réseau de pistes cyclables protégées", "une nouvelle médiathèque", "un parc au bord du fleuve"]}
FEATURES = ["noise cancellation", "a brighter display", "voice control", "USB-C fast charging", "water resistance"]
HABITS = [("daily walking", "walked at least 30 minutes a day", "heart disease", "develop heart disease"),
          ("regular sleep schedules", "went to bed at consistent times", "depression", "report symptoms of depression"),
          ("eating breakfast", "ate breakfast every day", "type 2 diabetes", "develop type 2 diabetes")]
SUMMARIZE_WRAP = {
    "en": ["Summarize this in one or two sentences:\n\n{p}", "TL;DR:\n\n{p}",
           "Can you give me a short summary of the following article?\n\n{p}",
           "Summarize for a busy executive:\n{p}", "{p}\n\nSummarize the text above in one sentence."],
    "es": ["Resume el siguiente texto en una o dos frases:\n\n{p}", "¿Puedes hacerme un resumen breve de esta noticia?\n\n{p}",
           "{p}\n\nResume el texto anterior."],
    "fr": ["Résume ce texte en une ou deux phrases :\n\n{p}", "Peux-tu me faire un court résumé de cet article ?\n\n{p}",
           "{p}\n\nRésume le texte ci-dessus."],
}
SUMMARY_PREFIX = {"en": ["", "Summary: ", "In short: ", "Here's a brief summary. "],
                  "es": ["", "Resumen: ", "En resumen: "], "fr": ["", "Résumé : ", "En bref : "]}

# ---------------------------------------------------------------- json_tool
PERSON_SENTENCES = {
    "en": {"nc": ["{name} {surname} recently moved to {city} to start a new job.",
                  "Hi, my name is {name} {surname} and I live in {city}.",
                  "Our new customer, {name} {surname}, is based in {city} and signed up last week.",
                  "After ten years abroad, {name} {surname} returned home to {city}."],
           "nac": ["{name} {surname}, {age}, lives in {city} and works as a nurse.",
                   "I'm {name} {surname}. I'm {age} years old and I just moved to {city}.",
                   "The winner, {age}-year-old {name} {surname} from {city}, finished in under three hours."]},
    "es": {"nc": ["{name} {surname} se mudó hace poco a {city} por trabajo.", "Hola, me llamo {name} {surname} y vivo en {city}."],
           "nac": ["{name} {surname} tiene {age} años y vive en {city}."]},
    "fr": {"nc": ["{name} {surname} vient de s'installer à {city} pour son travail.", "Bonjour, je m'appelle {name} {surname} et j'habite à {city}."],
           "nac": ["{name} {surname}, {age} ans, habite à {city}."]},
}
PERSON_PROMPTS = {
    "en": {"nc": ["Extract name and city as JSON from: \"{s}\"", "Return only JSON with the keys \"name\" and \"city\".\nText: {s}",
                  "From the sentence below, pull out the person's name and city. Answer with a JSON object.\n\n{s}"],
           "nac": ["Extract name, age and city as JSON from: \"{s}\"", "Give me a JSON object with keys name, age (integer) and city for: {s}"]},
    "es": {"nc": ["Extrae el nombre y la ciudad en formato JSON de: \"{s}\""], "nac": ["Extrae nombre, edad y ciudad como JSON (claves name, age, city): \"{s}\""]},
    "fr": {"nc": ["Extrais le nom et la ville au format JSON (clés name et city) : « {s} »"], "nac": ["Donne un objet JSON avec name, age et city : « {s} »"]},
}
CONTACT_SENTENCES = {
    "en": ["You can reach {name} {surname} at {email} or on {phone}.", "Contact: {name} {surname}, email {email}, phone {phone}."],
    "es": ["Puede contactar con {name} {surname} en {email} o en el {phone}."],
    "fr": ["Vous pouvez joindre {name} {surname} à {email} ou au {phone}."],
}
CONTACT_PROMPTS = {
    "en": ["Extract the contact details as JSON (name, email, phone): {s}", "Turn this into a JSON contact card with keys name, email and phone.\n\n{s}"],
    "es": ["Extrae los datos de contacto en JSON (name, email, phone): {s}"],
    "fr": ["Extrais les coordonnées au format JSON (name, email, phone) : {s}"],
}
ORDER_SENTENCES = ["Please send {q} {item} at {price_m} each to our {city} office.",
                   "We need {q} more {item} for the {city} team; the quote says {price_m} per unit."]
ORDER_ITEMS = ["USB-C cables", "ergonomic chairs", "monitor arms", "laptop stands", "desk lamps", "whiteboards"]
INVOICE_SENTENCES = ["Invoice INV-{num} from {vendor} for {amount} USD is due on {date}.",
                     "Reminder: {vendor} sent invoice INV-{num} ({amount} USD), payable by {date}."]
VENDORS = ["Globant Supplies", "Northwind Traders", "Blue Harbor Logistics", "Pixel & Paper", "Contoso Cloud"]
ORDER_PROMPT = "Convert this order request to JSON with product, quantity, unit_price and ship_to: {s}"
INVOICE_PROMPT = "Extract the invoice fields (vendor, invoice_number, amount, currency, due_date) as JSON:\n{s}"
ORDERS_BY_EMAIL = "Find {status} orders for the customer with email {customer_email}."
TOOL_SYSTEM = [
    "You are an assistant that can call tools. When a tool is needed, reply with only a JSON object of the form {{\"tool\": <name>, \"arguments\": {{...}}}}.\nAvailable tools:\n{tools}",
    "You have access to the functions below. Respond with a single JSON tool call ({{\"tool\": ..., \"arguments\": ...}}) and no other text.\n{tools}",
]
TOOLS = {
    "get_weather": {"description": "Get the current weather for a city.", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}},
    "convert_currency": {"description": "Convert an amount between currencies.", "parameters": {"type": "object", "properties": {
        "amount": {"type": "number"}, "from_currency": {"type": "string", "description": "ISO 4217 code"},
        "to_currency": {"type": "string", "description": "ISO 4217 code"}}, "required": ["amount", "from_currency", "to_currency"]}},
    "create_ticket": {"description": "Open an IT helpdesk ticket.", "parameters": {"type": "object", "properties": {
        "subject": {"type": "string"}, "priority": {"type": "string", "enum": ["low", "normal", "high"]}}, "required": ["subject"]}},
    "search_orders": {"description": "Search customer orders.", "parameters": {"type": "object", "properties": {
        "customer_name": {"type": "string"}, "customer_email": {"type": "string"},
        "status": {"type": "string", "enum": ["pending", "shipped", "delivered", "cancelled"]}}}},
    "schedule_meeting": {"description": "Create a calendar event.", "parameters": {"type": "object", "properties": {
        "title": {"type": "string"}, "date": {"type": "string", "description": "YYYY-MM-DD"}, "duration_minutes": {"type": "integer"},
        "attendees": {"type": "array", "items": {"type": "string"}}}, "required": ["title", "date"]}},
}
# (template, argument keys it fixes); arguments are filled from the same facts
TOOL_REQUESTS = {
    "get_weather": [("What's the weather like in {city} right now?", ["city"]),
                    ("Do I need an umbrella in {city} today? Give me the temperature in {unit}.", ["city", "unit"]),
                    ("weather {city} in {unit} pls", ["city", "unit"])],
    "convert_currency": [("How much is {amount} {from_currency} in {to_currency}?", ["amount", "from_currency", "to_currency"]),
                         ("Convert {amount} {from_currency} to {to_currency} please.", ["amount", "from_currency", "to_currency"])],
    "create_ticket": [("Open a {priority} priority ticket: {subject}.", ["subject", "priority"]),
                      ("Please file a helpdesk ticket saying \"{subject}\".", ["subject"])],
    "search_orders": [("Show me {status} orders for {customer_name}.", ["customer_name", "status"]),
                      ("Does {customer_name} have any orders that are still {status}?", ["customer_name", "status"])],
    "schedule_meeting": [("Set up a {duration_minutes}-minute meeting called \"{title}\" on {date} with {a1} and {a2}.",
                          ["title", "date", "duration_minutes", "attendees"]),
                         ("Book \"{title}\" for {date}, {duration_minutes} minutes, invite {a1} and {a2}.",
                          ["title", "date", "duration_minutes", "attendees"])],
}
TICKET_SUBJECTS = ["VPN disconnects every hour", "Printer on floor 3 is out of toner", "Cannot access the shared drive",
                   "Laptop battery drains overnight", "New monitor needed for the design team", "Outlook keeps asking for my password"]
MEETING_TITLES = ["Q1 planning", "Design review", "Weekly sync", "Quantization results", "Budget check-in", "Onboarding plan"]
CURRENCIES = ["USD", "EUR", "GBP", "JPY", "CHF", "CAD"]

# ---------------------------------------------------------------- code
CODE_PROMPTS = ["Write a Python function that {desc}.", "How do I write a function in Python that {desc}?",
                "Can you give me a short Python helper that {desc}? Please add a docstring.",
                "I need `{fn}` in Python: it {desc}. Keep it simple, no external libraries.",
                "python: function that {desc}", "Quick one: what's a clean way to write a Python function that {desc}?"]
CODE_INTROS = ["Here's a simple implementation:", "Sure, here is a clean version:", "You can do it like this:",
               "Here's one way to write it:", "This should do what you need:"]
CODE_TIPS = ["", "It only uses the standard library, so there is nothing to install.",
             "If you use it in several places, put it in a small utils module and add a unit test for the edge cases.",
             "Type hints are optional, but they make the intent clearer and help your editor.",
             "Let me know if you want a version that handles more edge cases."]
CODE_TASKS = [
    {"fn": "is_palindrome", "desc": ["checks whether a string is a palindrome, ignoring case and punctuation", "tells me if a phrase reads the same backwards"],
     "code": 'def is_palindrome(text: str) -> bool:\n    """Return True if text reads the same both ways (letters and digits only)."""\n    cleaned = [ch.lower() for ch in text if ch.isalnum()]\n    return cleaned == cleaned[::-1]\n',
     "examples": ['is_palindrome("Never odd or even")', 'is_palindrome("Python")'],
     "note": "It keeps only letters and digits, lowercases them, and compares the list with its reverse."},
    {"fn": "fizzbuzz", "desc": ["returns the FizzBuzz sequence up to n", "does FizzBuzz for the numbers 1 to n"],
     "code": 'def fizzbuzz(n: int) -> list[str]:\n    """Return the FizzBuzz sequence from 1 to n as strings."""\n    out = []\n    for i in range(1, n + 1):\n        word = ("Fizz" if i % 3 == 0 else "") + ("Buzz" if i % 5 == 0 else "")\n        out.append(word or str(i))\n    return out\n',
     "examples": ["fizzbuzz(5)", "fizzbuzz(15)[-3:]"],
     "note": "Building the word from two separate checks avoids a special branch for multiples of 15."},
    {"fn": "fibonacci", "desc": ["returns the first n Fibonacci numbers", "generates a list of Fibonacci numbers without recursion"],
     "code": 'def fibonacci(n: int) -> list[int]:\n    """Return the first n Fibonacci numbers."""\n    seq = []\n    a, b = 0, 1\n    for _ in range(n):\n        seq.append(a)\n        a, b = b, a + b\n    return seq\n',
     "examples": ["fibonacci(10)", "fibonacci(1)"],
     "note": "The iterative version runs in O(n) time and avoids the exponential cost of the naive recursive one."},
    {"fn": "count_vowels", "desc": ["counts the vowels in a string", "returns how many vowels a piece of text contains"],
     "code": 'def count_vowels(text: str) -> int:\n    """Count the vowels (a, e, i, o, u) in text, case-insensitively."""\n    return sum(1 for ch in text.lower() if ch in "aeiou")\n',
     "examples": ['count_vowels("Hello World")', 'count_vowels("rhythm")'],
     "note": "A generator expression inside sum() keeps it to one line without building an intermediate list."},
    {"fn": "flatten", "desc": ["flattens a nested list", "turns a list of lists (any depth) into one flat list"],
     "code": 'def flatten(nested: list) -> list:\n    """Flatten arbitrarily nested lists into a single list."""\n    flat = []\n    for item in nested:\n        if isinstance(item, list):\n            flat.extend(flatten(item))\n        else:\n            flat.append(item)\n    return flat\n',
     "examples": ["flatten([1, [2, [3, 4]], 5])", 'flatten([[], ["a", ["b"]]])'],
     "note": "It only recurses into lists, so strings and tuples stay as single items."},
    {"fn": "merge_sorted", "desc": ["merges two sorted lists into one sorted list", "combines two already sorted lists without calling sort()"],
     "code": 'def merge_sorted(a: list[int], b: list[int]) -> list[int]:\n    """Merge two already-sorted lists into one sorted list."""\n    i = j = 0\n    merged = []\n    while i < len(a) and j < len(b):\n        if a[i] <= b[j]:\n            merged.append(a[i])\n            i += 1\n        else:\n            merged.append(b[j])\n            j += 1\n    return merged + a[i:] + b[j:]\n',
     "examples": ["merge_sorted([1, 4, 9], [2, 3, 10])", "merge_sorted([], [5, 6])"],
     "note": "This is the merge step of merge sort: it walks each list once, so it runs in O(len(a) + len(b))."},
    {"fn": "chunked", "desc": ["splits a list into chunks of a given size", "breaks a list into batches of n items"],
     "code": 'def chunked(items: list, size: int) -> list[list]:\n    """Split items into consecutive chunks of at most size elements."""\n    if size <= 0:\n        raise ValueError("size must be positive")\n    return [items[i:i + size] for i in range(0, len(items), size)]\n',
     "examples": ["chunked([1, 2, 3, 4, 5], 2)", 'chunked(list("abcdef"), 3)'],
     "note": "The last chunk may be shorter, and a non-positive size raises ValueError instead of looping forever."},
    {"fn": "parse_kv", "desc": ["parses a string like 'a=1; b=2' into a dict", "turns key=value pairs separated by semicolons into a dictionary"],
     "code": 'def parse_kv(text: str, sep: str = ";") -> dict[str, str]:\n    """Parse key=value pairs separated by sep into a dict."""\n    result = {}\n    for part in text.split(sep):\n        if "=" in part:\n            key, value = part.split("=", 1)\n            result[key.strip()] = value.strip()\n    return result\n',
     "examples": ['parse_kv("host=db; port=5432; user=admin")', 'parse_kv("a=1;b=2=3")'],
     "note": "Splitting on the first '=' only means values may contain '=' themselves; fragments without '=' are skipped."},
    {"fn": "dedupe", "desc": ["removes duplicates from a list but keeps the original order", "deduplicates a list while preserving order"],
     "code": 'def dedupe(items: list) -> list:\n    """Remove duplicates, keeping the first occurrence of each item."""\n    seen = set()\n    unique = []\n    for item in items:\n        if item not in seen:\n            seen.add(item)\n            unique.append(item)\n    return unique\n',
     "examples": ["dedupe([3, 1, 3, 2, 1])", 'dedupe(["b", "a", "b"])'],
     "note": "A set makes each membership check O(1); for hashable items, list(dict.fromkeys(items)) is a one-line alternative."},
    {"fn": "celsius_to_fahrenheit", "desc": ["converts Celsius to Fahrenheit", "turns a temperature in °C into °F"],
     "code": 'def celsius_to_fahrenheit(celsius: float) -> float:\n    """Convert a temperature from Celsius to Fahrenheit."""\n    return celsius * 9 / 5 + 32\n',
     "examples": ["celsius_to_fahrenheit(100)", "celsius_to_fahrenheit(-40)", "celsius_to_fahrenheit(37)"],
     "note": "The formula is F = C × 9/5 + 32; -40 is the one temperature that reads the same on both scales."},
    {"fn": "top_words", "desc": ["returns the most common words in a text", "finds the n most frequent words in a string"],
     "code": 'from collections import Counter\n\n\ndef top_words(text: str, n: int = 3) -> list[tuple[str, int]]:\n    """Return the n most common words in text, lowercased."""\n    words = [w.strip(".,!?;:").lower() for w in text.split()]\n    return Counter(w for w in words if w).most_common(n)\n',
     "examples": ['top_words("the cat and the hat and the bat", 2)', 'top_words("Go, go, GO! Stop.", 1)'],
     "note": "Counter.most_common does the sorting for you, and punctuation is stripped from the ends of each word."},
    {"fn": "binary_search", "desc": ["does a binary search on a sorted list", "finds the index of a value in a sorted list in O(log n)"],
     "code": 'def binary_search(items: list[int], target: int) -> int:\n    """Return the index of target in sorted items, or -1 if absent."""\n    lo, hi = 0, len(items) - 1\n    while lo <= hi:\n        mid = (lo + hi) // 2\n        if items[mid] == target:\n            return mid\n        if items[mid] < target:\n            lo = mid + 1\n        else:\n            hi = mid - 1\n    return -1\n',
     "examples": ["binary_search([1, 3, 5, 7, 9, 11], 7)", "binary_search([1, 3, 5], 4)"],
     "note": "Each step halves the search range, so it runs in O(log n); the list must already be sorted."},
    {"fn": "is_prime", "desc": ["checks if a number is prime", "tells whether an integer is a prime number"],
     "code": 'def is_prime(n: int) -> bool:\n    """Return True if n is a prime number."""\n    if n < 2:\n        return False\n    i = 2\n    while i * i <= n:\n        if n % i == 0:\n            return False\n        i += 1\n    return True\n',
     "examples": ["is_prime(97)", "is_prime(91)", "is_prime(1)"],
     "note": "It only tests divisors up to the square root of n, which is enough to find a factor if one exists."},
    {"fn": "slugify", "desc": ["turns a title into a URL slug", "makes a lowercase, hyphen-separated slug from a blog post title"],
     "code": 'import re\n\n\ndef slugify(title: str) -> str:\n    """Turn a title into a lowercase, hyphen-separated URL slug."""\n    slug = re.sub(r"[^a-z0-9]+", "-", title.lower())\n    return slug.strip("-")\n',
     "examples": ['slugify("Hello, World! 2026 Edition")', 'slugify("  Quantized Models: A Primer ")'],
     "note": "Every run of characters that is not a letter or digit becomes a single hyphen, and hyphens at the ends are trimmed."},
    {"fn": "run_length_encode", "desc": ["does run-length encoding of a string", "compresses repeated characters, like 'aaab' to 'a3b1'"],
     "code": 'def run_length_encode(text: str) -> str:\n    """Compress runs of repeated characters, e.g. \'aaab\' -> \'a3b1\'."""\n    if not text:\n        return ""\n    out = []\n    current, count = text[0], 1\n    for ch in text[1:]:\n        if ch == current:\n            count += 1\n        else:\n            out.append(f"{current}{count}")\n            current, count = ch, 1\n    out.append(f"{current}{count}")\n    return "".join(out)\n',
     "examples": ['run_length_encode("aaabccdddd")', 'run_length_encode("abc")'],
     "note": "It walks the string once, counting how long each run is, and emits the character followed by the count."},
    {"fn": "sum_column", "desc": ["sums a numeric column in CSV text", "adds up one column of a CSV file that has a header row"],
     "code": 'import csv\nimport io\n\n\ndef sum_column(csv_text: str, column: str) -> float:\n    """Sum a numeric column of CSV text that has a header row."""\n    reader = csv.DictReader(io.StringIO(csv_text))\n    return sum(float(row[column]) for row in reader if row[column])\n',
     "examples": ['sum_column("item,price\\npen,1.5\\nbook,12\\n", "price")'],
     "note": "csv.DictReader handles quoting and maps each row to the header names; empty cells are skipped."},
]

# ---------------------------------------------------------------- support
SUPPORT_SYSTEM = {"en": "You are a friendly customer support assistant for {brand}. Be concise and polite.",
                  "es": "Eres el asistente de atención al cliente de {brand}. Responde de forma breve y amable.",
                  "fr": "Tu es l'assistant du service client de {brand}. Réponds de façon concise et polie."}
GREETINGS = {"en": ["Hi {name},", "Hello {name},", "Hi {name}, thanks for reaching out.", "Thanks for contacting us, {name}.", "Hi there,"],
             "es": ["Hola, {name}:", "Buenos días, {name}.", "Gracias por escribirnos, {name}.", "¡Hola!"],
             "fr": ["Bonjour {name},", "Bonjour {name}, merci pour votre message.", "Merci de nous avoir contactés, {name}.", "Bonjour,"]}
CLOSINGS = {"en": ["Let me know if there's anything else I can do.", "Have a great day!", "Best regards, the {brand} support team.", "Happy to help further if needed."],
            "es": ["Quedo a su disposición para cualquier otra consulta.", "¡Que tenga un buen día!", "Un saludo, el equipo de soporte de {brand}."],
            "fr": ["Je reste à votre disposition.", "Bonne journée !", "Cordialement, l'équipe support {brand}."]}
# each scenario: "ask" variants, and "answer" as a list of slots, one sentence picked per slot
SUPPORT = {
    "refund": {
        "en": {"ask": ["My {product} arrived with a cracked case (order #{order}). Can I get a refund?",
                       "Hi, I'd like to return the {product} from order #{order}. It stopped working after two days. How do I get my money back?"],
               "answer": [["I'm sorry to hear about the trouble with your {product}.", "Sorry about your {product}, that's not the experience we want for you."],
                          ["I've opened a refund for order #{order} for {amount_m}.", "I've started the return for order #{order}, and the full {amount_m} will be refunded."],
                          ["You'll see the money on your original payment method within {days} business days.", "Refunds usually reach your account within {days} business days."],
                          ["There's no need to send the item back.", "We've emailed you a prepaid return label, so you can drop the parcel at any post office."]]},
        "es": {"ask": ["Mi {product} llegó con la carcasa rota (pedido #{order}). ¿Pueden devolverme el dinero?",
                       "Hola, quiero devolver el {product} del pedido #{order}; dejó de funcionar a los dos días. ¿Cómo recupero mi dinero?"],
               "answer": [["Lamento mucho lo ocurrido con su {product}.", "Siento las molestias con su {product}."],
                          ["He iniciado el reembolso del pedido #{order} por {amount_m}.", "Ya he tramitado la devolución del pedido #{order}; le reembolsaremos {amount_m}."],
                          ["Verá el importe en su método de pago original en un plazo de {days} días hábiles.", "El reembolso suele tardar {days} días hábiles."],
                          ["No hace falta que nos envíe el artículo.", "Le hemos enviado por correo una etiqueta de devolución prepagada."]]},
        "fr": {"ask": ["Mon {product} est arrivé avec la coque fissurée (commande #{order}). Puis-je être remboursé ?",
                       "Bonjour, je voudrais renvoyer le {product} de la commande #{order}, il ne fonctionne plus au bout de deux jours. Comment me faire rembourser ?"],
               "answer": [["Je suis désolé pour ce souci avec votre {product}.", "Toutes nos excuses pour ce problème avec votre {product}."],
                          ["J'ai lancé le remboursement de la commande #{order} pour un montant de {amount_m}.", "Le retour de la commande #{order} est enregistré ; vous serez remboursé de {amount_m}."],
                          ["Le montant apparaîtra sur votre moyen de paiement d'origine sous {days} jours ouvrés.", "Comptez {days} jours ouvrés pour recevoir le remboursement."],
                          ["Inutile de nous renvoyer l'article.", "Nous vous avons envoyé une étiquette de retour prépayée par e-mail."]]},
    },
    "password": {
        "en": {"ask": ["I can't log in to my account and the password reset email never arrives. Can you help?",
                       "Locked out of my account after too many attempts. How do I reset my password?"],
               "answer": [["Sorry you're locked out!", "Let's get you back into your account."],
                          ["I've sent a new reset link; it is valid for {minutes} minutes.", "I've cleared the lock on your account and sent a fresh reset link, valid for {minutes} minutes."],
                          ["If it doesn't show up, please check your spam or promotions folder.", "Reset emails sometimes land in the spam folder, so it's worth a look there."],
                          ["After resetting, we recommend turning on two-factor authentication in Settings > Security.", "Once you're in, you can change your password any time under Settings > Security."]]},
        "es": {"ask": ["No puedo entrar en mi cuenta y nunca me llega el correo para restablecer la contraseña.",
                       "Mi cuenta está bloqueada tras varios intentos. ¿Cómo cambio la contraseña?"],
               "answer": [["Siento que no pueda acceder.", "Vamos a recuperar su cuenta."],
                          ["Le he enviado un nuevo enlace de restablecimiento, válido durante {minutes} minutos.", "He desbloqueado su cuenta y enviado un enlace nuevo que caduca en {minutes} minutos."],
                          ["Si no lo ve, revise la carpeta de spam.", "A veces estos correos acaban en la carpeta de correo no deseado."],
                          ["Después le recomendamos activar la verificación en dos pasos en Ajustes > Seguridad.", "Luego podrá cambiar la contraseña cuando quiera en Ajustes > Seguridad."]]},
        "fr": {"ask": ["Je n'arrive pas à me connecter et je ne reçois jamais l'e-mail de réinitialisation du mot de passe.",
                       "Mon compte est bloqué après plusieurs tentatives, comment réinitialiser mon mot de passe ?"],
               "answer": [["Désolé pour ce blocage.", "Nous allons vous aider à récupérer votre compte."],
                          ["Je vous ai envoyé un nouveau lien de réinitialisation, valable {minutes} minutes.", "J'ai débloqué votre compte et envoyé un nouveau lien, valable {minutes} minutes."],
                          ["S'il n'apparaît pas, vérifiez vos courriers indésirables.", "Ces e-mails arrivent parfois dans le dossier spam."],
                          ["Nous vous conseillons ensuite d'activer la double authentification dans Paramètres > Sécurité.", "Vous pourrez ensuite modifier votre mot de passe dans Paramètres > Sécurité."]]},
    },
    "shipping": {
        "en": {"ask": ["My order #{order} was supposed to arrive {late} days ago and the tracking hasn't moved. Where is it?",
                       "Hey, any update on order #{order}? Still no {product} and it's been over a week."],
               "answer": [["Thanks for your patience, and sorry for the delay.", "I understand how frustrating a late delivery is."],
                          ["I checked order #{order}: the parcel is held at the regional depot in {city}.", "Order #{order} left our warehouse but got stuck at the carrier's hub in {city}."],
                          ["I've asked the carrier to prioritise it, and it should reach you within {days} business days.", "The carrier has confirmed a new delivery window of {days} business days."],
                          ["If it hasn't arrived by then, we'll send a replacement at no cost.", "As an apology, I've added free express shipping to your next order."]]},
        "es": {"ask": ["Mi pedido #{order} tenía que llegar hace {late} días y el seguimiento no se mueve. ¿Dónde está?",
                       "Hola, ¿hay novedades del pedido #{order}? Ha pasado más de una semana y sigo sin mi {product}."],
               "answer": [["Gracias por su paciencia y disculpe el retraso.", "Entiendo lo frustrante que es un retraso."],
                          ["He revisado el pedido #{order}: el paquete está retenido en el centro de distribución de {city}.", "El pedido #{order} salió de nuestro almacén pero quedó parado en la central del transportista en {city}."],
                          ["He pedido al transportista que le dé prioridad; debería llegarle en {days} días hábiles.", "El transportista confirma una nueva entrega en un plazo de {days} días hábiles."],
                          ["Si no llega para entonces, le enviaremos un reemplazo sin coste.", "Como disculpa, su próximo pedido tendrá envío urgente gratuito."]]},
        "fr": {"ask": ["Ma commande #{order} devait arriver il y a {late} jours et le suivi ne bouge plus. Où est-elle ?",
                       "Bonjour, des nouvelles de la commande #{order} ? Toujours rien reçu après plus d'une semaine."],
               "answer": [["Merci pour votre patience et désolé pour ce retard.", "Je comprends que ce retard soit agaçant."],
                          ["J'ai vérifié la commande #{order} : le colis est bloqué au dépôt régional de {city}.", "La commande #{order} a quitté notre entrepôt mais attend au centre du transporteur à {city}."],
                          ["J'ai demandé au transporteur de la traiter en priorité ; elle devrait vous parvenir sous {days} jours ouvrés.", "Le transporteur annonce une nouvelle livraison sous {days} jours ouvrés."],
                          ["Si elle n'est pas arrivée d'ici là, nous vous enverrons un remplacement gratuitement.", "Pour nous excuser, la livraison express vous est offerte sur votre prochaine commande."]]},
    },
    "billing": {
        "en": {"ask": ["I was charged twice for my {plan} subscription this month ({amount_m} each time). Please fix this.",
                       "Why do I see two {amount_m} payments for the {plan} plan on my statement?"],
               "answer": [["Thanks for flagging this, and apologies for the confusion.", "You're right, I can see the duplicate charge."],
                          ["The second {amount_m} payment was a billing error on our side, and I've refunded it.", "I've reversed the extra {amount_m} charge for your {plan} plan."],
                          ["Depending on your bank, it takes {days} business days to appear.", "Your bank should show the refund within {days} business days."],
                          ["Your subscription itself is unaffected.", "I've also added a note to your account so it doesn't happen again."]]},
        "es": {"ask": ["Este mes me han cobrado dos veces la suscripción {plan} ({amount_m} cada vez). ¿Pueden solucionarlo?",
                       "¿Por qué aparecen dos cargos de {amount_m} del plan {plan} en mi extracto?"],
               "answer": [["Gracias por avisarnos y disculpe la confusión.", "Tiene razón, veo el cargo duplicado."],
                          ["El segundo cargo de {amount_m} fue un error nuestro y ya lo he reembolsado.", "He anulado el cargo extra de {amount_m} de su plan {plan}."],
                          ["Según su banco, tardará {days} días hábiles en reflejarse.", "Su banco debería mostrar el reembolso en {days} días hábiles."],
                          ["Su suscripción sigue activa con normalidad.", "He dejado una nota en su cuenta para que no vuelva a ocurrir."]]},
        "fr": {"ask": ["On m'a débité deux fois l'abonnement {plan} ce mois-ci ({amount_m} à chaque fois). Pouvez-vous corriger ?",
                       "Pourquoi vois-je deux prélèvements de {amount_m} pour la formule {plan} sur mon relevé ?"],
               "answer": [["Merci de nous l'avoir signalé, et désolé pour la confusion.", "Vous avez raison, je vois bien le double prélèvement."],
                          ["Le second prélèvement de {amount_m} est une erreur de notre part et je l'ai remboursé.", "J'ai annulé le prélèvement en trop de {amount_m} sur votre formule {plan}."],
                          ["Selon votre banque, il faut compter {days} jours ouvrés.", "Le remboursement devrait apparaître sous {days} jours ouvrés."],
                          ["Votre abonnement n'est pas affecté.", "J'ai ajouté une note à votre compte pour éviter que cela se reproduise."]]},
    },
    "cancel": {
        "en": {"ask": ["How do I cancel my {plan} plan? I don't want it to renew next month.", "Please cancel my subscription ({plan}). I'm moving abroad."],
               "answer": [["Sorry to see you go!", "No problem, I can help with that."],
                          ["Your {plan} plan is now set to cancel at the end of the current billing period, on {date}.", "I've switched off auto-renewal for your {plan} plan; it stays active until {date}."],
                          ["You won't be charged again, and you'll keep access to your data for {days} days afterwards.", "You can export your data any time before then from Settings > Account."],
                          ["If you change your mind, you can reactivate it with one click.", "We'd love to hear what we could do better, if you have a minute."]]},
        "es": {"ask": ["¿Cómo cancelo mi plan {plan}? No quiero que se renueve el mes que viene.", "Por favor, cancelen mi suscripción {plan}. Me mudo al extranjero."],
               "answer": [["¡Lamentamos que se vaya!", "Claro, le ayudo con eso."],
                          ["Su plan {plan} se cancelará al final del periodo actual, el {date}.", "He desactivado la renovación automática de su plan {plan}; seguirá activo hasta el {date}."],
                          ["No se le volverá a cobrar y conservará el acceso a sus datos durante {days} días.", "Puede exportar sus datos antes de esa fecha desde Ajustes > Cuenta."],
                          ["Si cambia de opinión, puede reactivarlo con un clic.", "Nos encantaría saber qué podemos mejorar."]]},
        "fr": {"ask": ["Comment résilier ma formule {plan} ? Je ne veux pas qu'elle soit renouvelée le mois prochain.", "Merci de résilier mon abonnement {plan}, je déménage à l'étranger."],
               "answer": [["Nous sommes tristes de vous voir partir !", "Pas de souci, je m'en occupe."],
                          ["Votre formule {plan} sera résiliée à la fin de la période en cours, le {date}.", "J'ai désactivé le renouvellement automatique de votre formule {plan} ; elle reste active jusqu'au {date}."],
                          ["Vous ne serez plus débité et vos données restent accessibles pendant {days} jours.", "Vous pouvez exporter vos données avant cette date depuis Paramètres > Compte."],
                          ["Si vous changez d'avis, vous pourrez la réactiver en un clic.", "N'hésitez pas à nous dire ce que nous pourrions améliorer."]]},
    },
    "device": {
        "en": {"ask": ["My {product} won't turn on, even after charging it overnight. What can I do?", "The {product} I bought last month keeps restarting every few minutes. Any ideas?"],
               "answer": [["Sorry your {product} is acting up.", "Let's try a few quick fixes."],
                          ["First, hold the power button for {secs} seconds to force a restart.", "Please unplug it, wait {secs} seconds, and plug it back in."],
                          ["If that doesn't help, a factory reset usually clears it: press the reset button on the back until the light blinks.", "Make sure it is on the latest firmware; you can update it from the app under Device > Updates."],
                          ["If the problem continues, it's covered by warranty and we'll replace it.", "If it still misbehaves, reply here and I'll arrange a free replacement."]]},
        "es": {"ask": ["Mi {product} no enciende, ni siquiera después de cargarlo toda la noche. ¿Qué hago?", "El {product} que compré el mes pasado se reinicia cada pocos minutos. ¿Alguna idea?"],
               "answer": [["Siento que su {product} esté dando problemas.", "Probemos algunas soluciones rápidas."],
                          ["Primero, mantenga pulsado el botón de encendido {secs} segundos para forzar el reinicio.", "Desenchúfelo, espere {secs} segundos y vuelva a enchufarlo."],
                          ["Si no funciona, un restablecimiento de fábrica suele resolverlo: pulse el botón de reinicio hasta que parpadee la luz.", "Compruebe que tiene el firmware más reciente desde la app, en Dispositivo > Actualizaciones."],
                          ["Si el problema continúa, está en garantía y se lo cambiamos.", "Si sigue fallando, responda aquí y le enviaremos uno nuevo sin coste."]]},
        "fr": {"ask": ["Mon {product} ne s'allume plus, même après une nuit en charge. Que faire ?", "Le {product} acheté le mois dernier redémarre toutes les deux minutes. Une idée ?"],
               "answer": [["Désolé que votre {product} vous pose problème.", "Essayons quelques solutions rapides."],
                          ["Commencez par maintenir le bouton d'alimentation {secs} secondes pour forcer le redémarrage.", "Débranchez-le, attendez {secs} secondes, puis rebranchez-le."],
                          ["Si cela ne suffit pas, une réinitialisation d'usine règle souvent le problème : appuyez sur le bouton reset jusqu'à ce que le voyant clignote.", "Vérifiez qu'il dispose du dernier firmware via l'application, rubrique Appareil > Mises à jour."],
                          ["Si le problème persiste, il est sous garantie et nous le remplacerons.", "S'il fait toujours des siennes, répondez ici et nous vous enverrons un appareil neuf gratuitement."]]},
    },
}
# generic follow-up turns for multi-turn support chats: (user question, assistant answer)
FOLLOWUPS = {
    "en": [("Thanks. How long will that take exactly?", "It normally takes {days} business days, and you'll get an email update at each step. Your reference is ticket #{ticket}, in case you need to follow up."),
           ("I tried that but it still doesn't work.", "Sorry it's still not working. I've escalated this as ticket #{ticket} to our technical team, and a specialist will contact you within {hours} hours. You don't need to do anything else in the meantime."),
           ("Can I speak to a human, please?", "Of course. I've passed your case (ticket #{ticket}) to a member of our team; they usually reply within {hours} hours. Everything we've discussed is already in the notes, so you won't have to repeat yourself."),
           ("Great, thank you! Will this affect my next invoice?", "No, your next invoice won't change. If anything looks off, just reply to this conversation and mention ticket #{ticket}, and we'll sort it out right away.")],
    "es": [("Gracias. ¿Cuánto tardará exactamente?", "Normalmente tarda {days} días hábiles y recibirá un correo en cada paso. Su referencia es el ticket #{ticket}, por si necesita hacer seguimiento."),
           ("Lo he probado, pero sigue sin funcionar.", "Lamento que siga sin funcionar. He escalado el caso como ticket #{ticket} a nuestro equipo técnico y un especialista le contactará en menos de {hours} horas."),
           ("¿Puedo hablar con una persona, por favor?", "Por supuesto. He pasado su caso (ticket #{ticket}) a un compañero; suelen responder en menos de {hours} horas y ya tienen todo el historial, así que no tendrá que repetir nada.")],
    "fr": [("Merci. Combien de temps cela prendra-t-il exactement ?", "Il faut généralement {days} jours ouvrés, et vous recevrez un e-mail à chaque étape. Votre référence est le ticket #{ticket} si vous devez nous relancer."),
           ("J'ai essayé, mais ça ne marche toujours pas.", "Désolé que le problème persiste. J'ai transmis votre dossier (ticket #{ticket}) à notre équipe technique ; un spécialiste vous contactera sous {hours} heures."),
           ("Est-ce que je peux parler à un conseiller, s'il vous plaît ?", "Bien sûr. J'ai transféré votre demande (ticket #{ticket}) à un conseiller, qui répond en général sous {hours} heures. Tout l'historique est dans le dossier, vous n'aurez rien à répéter.")],
}

# ---------------------------------------------------------------- PII sentences ({v} = the planted value)
PII_USER = {
    "email": {"en": ["My email is {v}.", "You can reach me at {v}.", "(Sent from {v})", "Please reply to {v}."],
              "es": ["Mi correo es {v}.", "Pueden escribirme a {v}."], "fr": ["Mon e-mail : {v}.", "Vous pouvez me joindre à {v}."]},
    "phone": {"en": ["Call me at {v} if that's easier.", "My phone number is {v}."],
              "es": ["Mi teléfono es el {v}.", "Pueden llamarme al {v}."], "fr": ["Mon numéro : {v}.", "Vous pouvez m'appeler au {v}."]},
    "card": {"en": ["I paid with the card {v}.", "The charge was on card {v}, exp 09/28."],
             "es": ["Pagué con la tarjeta {v}."], "fr": ["J'ai payé avec la carte {v}."]},
    "api_key": {"en": ["Here's my API key in case you need it: {v}"],
                "es": ["Mi clave de API es {v}."], "fr": ["Ma clé d'API est {v}."]},
    "ip": {"en": ["The server is at {v}.", "It fails when I connect to {v} from the office network.", "Our gateway IP is {v}, if that helps."],
           "es": ["El servidor está en {v}."], "fr": ["Le serveur est à l'adresse {v}."]},
}
API_KEY_USER = {  # en api_key sentences, matched to the key's provider
    "openai": ["Here's my API key in case you need it: {v}", "My config has OPENAI_API_KEY={v} set.",
               "I call it with headers={{\"Authorization\": \"Bearer {v}\"}} and get a 401."],
    "aws": ["My ~/.aws/credentials has aws_access_key_id = {v}", "The deploy uses access key {v}, if that matters."],
    "github": ["CI uses the token {v} to clone the repo.", "I set GITHUB_TOKEN={v} but the push still fails."],
}
PII_ECHO = {  # appended to a support answer so that some PII also appears in responses
    "email": {"en": ["I've sent the confirmation to {v}.", "We'll send updates to {v}."],
              "es": ["Le he enviado la confirmación a {v}."], "fr": ["Je vous ai envoyé la confirmation à {v}."]},
    "phone": {"en": ["A specialist will call you at {v}."], "es": ["Un especialista le llamará al {v}."],
              "fr": ["Un conseiller vous appellera au {v}."]},
}
