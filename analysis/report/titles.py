"""How headings name an experiment's configuration: as people do, never by a hash or by the union of
every arm's keys.

An experiment whose runs share one configuration variant is named with it ("paper_controlled
(env.phase_length=20)"). One whose arms differ from each other (an ablation: each arm flips its own key)
is named alone: each arm is already named by its own display name in the rows (e.g.
"tepa_rev-counts=lifetime"), and the union of the arms' keys, or a `cfg-` hash, would describe none of
them.
"""

from __future__ import annotations

#: The prefix of a configuration named by its hash (too many keys differ to name them).
HASHED = "cfg-"


def config_title(experiment: str, variants: dict[str, list[str]]) -> str:
    """The experiment's name for headings and figure titles (see the module docstring)."""
    named = variants.get(experiment) or []
    if len(named) == 1 and not named[0].startswith(HASHED):
        return f"{experiment} ({named[0]})"
    if len(named) == 1:
        return f"{experiment} (a configuration variant)"
    return experiment


def retitle(title: str, experiment: str, variants: dict[str, list[str]]) -> str:
    """A title written with the experiment's name and the union of its variants (as figures kept from an
    earlier analysis are titled), with that prefix named as `config_title` names it."""
    named = variants.get(experiment) or []
    union = f"{experiment} ({'; '.join(named)})" if named else experiment
    return config_title(experiment, variants) + title[len(union) :] if title.startswith(union) else title
