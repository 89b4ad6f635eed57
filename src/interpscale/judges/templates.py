"""The judge kinds: one registry entry each (``JUDGE_KINDS``) bundling the versioned,
user-overridable prompt template, its reply parser (by the template's ``output``), the
offline lexical scorer and the result type. A new judge kind is one ``register_judge_kind``.

The wording is ours; the rubrics, score scales and reply formats follow the Steerling
paper (App. C relevance 1–5 as JSON, App. E alignment 1–5 ``ALIGNMENT: <n>``, App. M
steering concept / quality 0–2 ``Rating: [[n]]``), AxBench's instruction-relevance
judge, and the explain/simulate protocol of Bills et al. used by the CRATE paper.
A template's ``version`` is part of every cache key, so editing a prompt never serves
stale answers.
"""

from __future__ import annotations

import hashlib
import json
import string
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from interpscale._registry import Registry, resolve
from interpscale.errors import UserError
from interpscale.judges.parsing import PARSERS, Parsed

OUTPUTS = tuple(PARSERS)  # the reply formats a template can ask for, each with its parser


@dataclass(frozen=True)
class PromptTemplate:
    """A chat prompt (optional system text, user text with ``{placeholders}``); ``output``
    the reply format (one of OUTPUTS), ``lo``/``hi`` its score range, ``reask`` the follow-up
    sent once when a reply cannot be parsed."""

    name: str
    user: str
    version: str
    output: str
    lo: float = 0
    hi: float = 0
    system: Optional[str] = None
    reask: str = ""
    max_tokens: int = 16

    def __post_init__(self) -> None:
        if self.output not in OUTPUTS:
            raise UserError(f"template {self.name!r}: output must be one of {OUTPUTS}, got {self.output!r}")
        self.fields  # noqa: B018  (checks the placeholder syntax)

    @property
    def fields(self) -> frozenset[str]:
        """Placeholders the template needs."""
        out = set()
        for part, text in (("user", self.user), ("system", self.system or "")):
            try:
                out.update(f for _, f, _, _ in string.Formatter().parse(text) if f)
            except ValueError as exc:
                raise UserError(f"template {self.name!r}: bad placeholder syntax in {part} text: {exc}") from None
        return frozenset(out)

    def render(self, values: Mapping[str, Any]) -> list[dict[str, str]]:
        """Fill the placeholders and return chat messages."""
        if missing := sorted(self.fields - set(values)):
            raise UserError(f"template {self.name!r} needs values for {missing}")
        msgs = [{"role": "system", "content": self.system.format(**values)}] if self.system else []
        return msgs + [{"role": "user", "content": self.user.format(**values)}]


RATING_REASK = "Reply with exactly one line: Rating: [[0]], Rating: [[1]] or Rating: [[2]]."


def _t(name: str, output: str, lo: float, hi: float, user: str, *, system: str | None = None,
       reask: str = RATING_REASK, max_tokens: int = 16) -> PromptTemplate:
    return PromptTemplate(name=name, user=user.strip("\n"), system=system.strip("\n") if system else None,
                          version=f"{name}-v1", output=output, lo=lo, hi=hi, reask=reask, max_tokens=max_tokens)


# --- App. E: known concept alignment, 1-5 ---------------------------------------------
ALIGNMENT = _t("alignment", "alignment", 1, 5, system="""
You assess interpretability research. A language model has a learned direction for one
named concept; projecting that direction through the model's output layer gives the
vocabulary items it promotes most. Decide whether those items express the named concept.

Use this 1-5 scale:
5 = the items clearly express the concept; nearly all of them are on topic.
4 = the items mostly express the concept, with a little noise or a few tangents.
3 = the items partly express the concept; relevant and off-topic items are mixed.
2 = the items barely relate; only a handful connect to the concept.
1 = the items have nothing to do with the concept.

Items count as relevant when they are related in meaning, not only when they repeat words
of the label: names, abbreviations, word pieces and associated terms all count. (For a
concept such as 'road cycling', items like 'peloton', 'Tour', 'derailleur' and 'sprint'
are all relevant.)

Reply with a single line and nothing else:
ALIGNMENT: <integer from 1 to 5>
""", user="""
Concept name: {label}
Concept description: {description}

Items the concept direction promotes most (best first):
{tokens}
""", reask="Your reply did not follow the required format. Reply with one line only: ALIGNMENT: <integer from 1 to 5>")

# --- App. M: steering concept score, 0-2 (single user message, no system) --------------
STEER_CONCEPT = _t("steer_concept", "rating", 0, 2, user="""
You are a neutral grader.

Judge how strongly the TEXT below expresses the TARGET CONCEPT, going by meaning (the
concept can be present without any word of its label). Grade the TEXT and nothing else.

2 = the concept is plainly present, backed by several explicit details
1 = the concept shows up only weakly, indirectly or in passing
0 = the concept does not appear

Reply with exactly one line of the form Rating: [[0]], Rating: [[1]] or Rating: [[2]].

[TARGET CONCEPT]
{label}

[WHAT THE CONCEPT MEANS]
{description}

[TEXT]
{continuation}

Grade the TEXT now, replying only with Rating: [[0]], Rating: [[1]] or Rating: [[2]].
""")

# --- App. M: steering quality score, 0-2; the judge sees only the continuation ---------
STEER_QUALITY = _t("steer_quality", "rating", 0, 2, user="""
You are a neutral grader.

Judge only how well the TEXT below is written: is it fluent, coherent and easy to read?
Ignore what it is about.

2 = fluent and coherent, reads naturally
1 = understandable, but with clear problems (clumsy wording, abrupt jumps, some repetition)
0 = hard to read (incoherent, heavy repetition, broken text)

Reply with exactly one line of the form Rating: [[0]], Rating: [[1]] or Rating: [[2]].

[TEXT]
{continuation}

Grade the TEXT now, replying only with Rating: [[0]], Rating: [[1]] or Rating: [[2]].
""")

# Paper variant (App. M): the prefix is shown for context but not graded.
STEER_QUALITY_WITH_PREFIX = _t("steer_quality_prefix", "rating", 0, 2, user="""
You are a neutral grader.

Judge only how well the CONTINUATION is written: is it fluent, coherent, easy to read, and
does it follow on from the PREFIX? The PREFIX is context; do not grade it.

2 = fluent and coherent, follows on naturally
1 = understandable, but with clear problems (clumsy wording, abrupt jumps, some repetition)
0 = hard to read (incoherent, heavy repetition) or unrelated to the prefix

Reply with exactly one line of the form Rating: [[0]], Rating: [[1]] or Rating: [[2]].

[PREFIX - context only]
{prompt}

[CONTINUATION - grade this]
{continuation}

Grade the CONTINUATION now, replying only with Rating: [[0]], Rating: [[1]] or Rating: [[2]].
""")

# --- AxBench's third judge: does the continuation address the instruction? ------------
STEER_INSTRUCTION = _t("steer_instruction", "rating", 0, 2, user="""
You are a neutral grader.

Judge whether the RESPONSE addresses the INSTRUCTION it was written for, regardless of
style or of any unrelated topic it drifts into.

2 = the response clearly deals with the instruction
1 = the response touches on the instruction only partly or loosely
0 = the response ignores the instruction

Reply with exactly one line of the form Rating: [[0]], Rating: [[1]] or Rating: [[2]].

[INSTRUCTION]
{prompt}

[RESPONSE]
{continuation}

Grade the RESPONSE now, replying only with Rating: [[0]], Rating: [[1]] or Rating: [[2]].
""")

# --- App. C: concept relevance to a text chunk, 1-5 per candidate as JSON ---------------
RELEVANCE = _t("relevance", "json_scores", 1, 5, system="""
You check whether concepts really occur in a passage. For every concept listed, grade how
well the passage exhibits it, openly or implicitly, on this 1-5 scale:
5 = central: the passage is explicitly about it or it is a main theme
4 = strong: clearly shown, with plenty of supporting material
3 = moderate: plainly connected, with some supporting material
2 = weak: a tangential link or a passing, surface-level mention
1 = absent: unrelated, or the passage merely shares vocabulary without being about it

Weigh both explicit mentions and whether the passage actually demonstrates the concept.
Reply with one line of JSON mapping each concept's letter to its integer grade, for
example {{"A": 3, "B": 1}}. Write nothing else.
""", user="""
Grade each concept below against the passage on the 1-5 scale.

--- PASSAGE ---
{chunk}

--- CONCEPTS ---
{concepts}
""", reask="Reply with one line of JSON only, mapping every concept letter to an integer from 1 to 5.",
    max_tokens=256)

# --- Bills et al. / CRATE App. B: explain, then simulate -------------------------------
EXPLAIN = _t("explain", "explanation", 0, 0, system="""
You study single units (neurons or features) inside a language model. You are shown text
excerpts, one token per line with the unit's activation after a tab. Activations are scaled
to integers 0-10; most tokens are 0. Work out what the unit responds to and describe it in
one short phrase (a few words). Reply with one line and nothing else:
EXPLANATION: <short phrase>
""", user="""
{excerpts}
""", reask="Reply with one line only: EXPLANATION: <short phrase>", max_tokens=64)

SIMULATE = _t("simulate", "activations", 0, 10, system="""
You predict how a unit inside a language model will respond to text. You are told what the
unit responds to, then given the tokens of one excerpt, numbered. For every token predict
the unit's activation as an integer 0-10 (0 = silent, 10 = strongest); most tokens are 0.
Reply with one line of JSON and nothing else: a list holding exactly one integer per token,
in order.
""", user="""
The unit responds to: {explanation}

Tokens ({n_tokens} in total):
{tokens}
""", reask="Reply with one line only: a JSON list with exactly one integer (0-10) per token.", max_tokens=512)

@dataclass(frozen=True)
class JudgeKind:
    """One kind of judgement: its template, the parser of its replies, the offline lexical
    backend's scorer and the result type its scorer returns (lazy ``"module:object"`` paths,
    imported when first used, so this table names them without loading them)."""

    template: PromptTemplate
    offline: str  # "module:function" scoring one task's data without an LLM
    result: str  # "module:Class" of the scorer's result

    @property
    def name(self) -> str:
        return self.template.name

    @property
    def parser(self) -> Callable[..., Optional[Parsed]]:
        return PARSERS[self.template.output]

    def score_offline(self, data: Mapping[str, Any]) -> Any:
        return resolve(self.offline)(data)

    @property
    def result_type(self) -> type:
        return resolve(self.result)


JUDGE_KINDS: Registry[JudgeKind] = Registry("judge kind", hint=lambda name: "add one with templates.register_judge_kind")


def register_judge_kind(kind: JudgeKind, *, overwrite: bool = False) -> JudgeKind:
    return JUDGE_KINDS.register(kind.name, kind, overwrite=overwrite)


_LEX, _SCORED = "interpscale.judges.lexical", "interpscale.judges.scorers"
for _tpl, _offline, _result in (
        (ALIGNMENT, "alignment_task", f"{_SCORED}:AlignmentResult"),
        (STEER_CONCEPT, "steer_concept_task", "interpscale.judges.steering:SteeringResult"),
        (STEER_QUALITY, "quality_task", "interpscale.judges.steering:SteeringResult"),
        (STEER_QUALITY_WITH_PREFIX, "quality_task", "interpscale.judges.steering:SteeringResult"),
        (STEER_INSTRUCTION, "instruction_task", "interpscale.judges.steering:SteeringResult"),
        (RELEVANCE, "relevance_task", f"{_SCORED}:RelevanceResult"),
        (EXPLAIN, "explain_task", "interpscale.judges.scorers:AutoInterpResult"),
        (SIMULATE, "simulate_task", "interpscale.judges.scorers:AutoInterpResult")):
    register_judge_kind(JudgeKind(_tpl, f"{_LEX}:{_offline}", _result))

DEFAULT_TEMPLATES: Mapping[str, PromptTemplate] = {name: kind.template for name, kind in JUDGE_KINDS.items()}


@dataclass(frozen=True)
class TemplateSet:
    """The templates in use: the defaults with any user overrides applied."""

    templates: Mapping[str, PromptTemplate] = field(default_factory=lambda: dict(DEFAULT_TEMPLATES))

    def __getitem__(self, name: str) -> PromptTemplate:
        try:
            return self.templates[name]
        except KeyError:
            raise UserError(f"unknown judge template {name!r}; known: {sorted(self.templates)}") from None

    def override(self, overrides: Mapping[str, Mapping[str, Any]]) -> "TemplateSet":
        """Replace the ``system``/``user``/``reask``/``max_tokens`` of named templates; an
        override uses exactly the default's placeholders (no input silently dropped) and gets
        the version ``<name>-custom-<hash>`` unless it names its own."""
        out = dict(self.templates)
        for name, spec in overrides.items():
            base = self[name]
            if unknown := set(spec) - {"system", "user", "reask", "max_tokens", "version"}:
                raise UserError(f"template override {name!r}: unknown keys {sorted(unknown)}")
            new = replace(base, **{k: v for k, v in spec.items() if k != "version"})
            if lost := base.fields - new.fields:
                raise UserError(f"template override {name!r} drops placeholders {sorted(lost)}")
            if extra := new.fields - base.fields:
                raise UserError(f"template override {name!r} uses unknown placeholders {sorted(extra)}")
            digest = hashlib.sha256(json.dumps([new.system, new.user, new.reask], sort_keys=True).encode()).hexdigest()
            out[name] = replace(new, version=str(spec.get("version") or f"{name}-custom-{digest[:12]}"))
        return TemplateSet(out)


def load_templates(path: str | Path | None = None) -> TemplateSet:
    """The default templates, overridden from a TOML or JSON file of
    ``{name: {system?, user?, reask?, max_tokens?, version?}}`` when ``path`` is given."""
    if path is None:
        return TemplateSet()
    p = Path(path)
    if not p.is_file():
        raise UserError(f"template file {p} does not exist")
    try:
        text = p.read_text(encoding="utf-8")
        data = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:  # TOMLDecodeError and JSONDecodeError are ValueErrors
        raise UserError(f"template file {p}: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise UserError(f"template file {p}: expected a table of tables {{name: {{user: ...}}}}")
    try:
        return TemplateSet().override(data)
    except ValueError as exc:
        raise UserError(f"template file {p}: {exc}") from None
