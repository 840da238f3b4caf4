"""The model versions a front serves: every verified version of the repository, each under
the service of its kind (service.runtime.kinds: translators on TranslationService, captioners
on CaptionService), the newest `max_versions` of each model, and each service's default."""

from __future__ import annotations

from pathlib import Path

from service.front.caption import CaptionServicer
from service.front.config import ServerConfig
from service.front.translate import TranslationServicer
from service.front.versions import newest
from service.runtime.errors import ModelRepositoryError
from service.runtime.kinds import ServedModel, served_model
from service.runtime.repository import MANIFEST, manifests, verify

TRANSLATION_SERVICE = TranslationServicer.service
CAPTION_SERVICE = CaptionServicer.service
SERVICES = {  # service: the setting naming its default model
    TRANSLATION_SERVICE: "default_translator",
    CAPTION_SERVICE: "default_captioner",
}

SERVICERS = {servicer.service: servicer for servicer in (TranslationServicer, CaptionServicer)}


Models = dict[str, dict[str, dict[str, ServedModel]]]  # service -> name -> version -> model


def load_repository(config: ServerConfig) -> Models:
    """{service: {model name: {version: ServedModel}}} of every verified version under the
    repository, each under the service of its kind."""
    root = Path(config.repository)
    found = manifests(root)
    if not found:
        raise ModelRepositoryError(
            f"no model repository at {root} (expected <model>/<version>/{MANIFEST}); build one "
            f"with: attnserve export translator --out {root}"
        )
    models: Models = {}
    for manifest in found:
        model = served_model(verify(manifest.parent), config)
        models.setdefault(model.service, {}).setdefault(model.version.name, {})[
            model.version.version
        ] = model
    for names in models.values():  # the newest max_versions of each model
        for name, versions in names.items():
            keep = newest(versions, config.max_versions)
            names[name] = {v: m for v, m in versions.items() if v in keep}
    return models


def default_models(config: ServerConfig, models: Models) -> dict[str, str]:
    """{service: its default model name}: the one the configuration names, else the service's
    only model. Several models and no setting is an error, never a guess."""
    defaults, problems = {}, []
    for service, names in models.items():
        setting = SERVICES[service]
        declared = getattr(config, setting)
        if declared:
            if declared not in names:
                problems.append(
                    f"{setting} = {declared!r}, not a {service} model ({sorted(names)})"
                )
            defaults[service] = declared
        elif len(names) == 1:
            defaults[service] = next(iter(names))
        else:
            problems.append(f"{service} serves {sorted(names)}: set {setting} to one of them")
    if problems:
        raise ModelRepositoryError("default models: " + "; ".join(problems))
    return defaults
