# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Turn a role's meta/argument_specs.yml into an AWX survey spec (JSON).

AWX does not build surveys from role argument specs (ansible/awx#20, #578), so this keeps one source of truth:
generate the survey, then load it with awx.awx.job_template (survey_enabled: true, survey_spec: ...) or POST it
to /api/v2/job_templates/<id>/survey_spec/. docs/awx.md shows both.

    .venv/bin/python scripts/awx_survey.py roles/containerd_runtime > containerd_runtime.survey.json
    .venv/bin/python scripts/awx_survey.py roles/containerd_runtime --only containerd_runtime_set_as_default

Mapping (AWX question types as its API validates them):
    str / path                  -> text          (no_log -> password)
    raw                         -> text, only when named with --only (the role takes any type; AWX sends a string)
    int                         -> integer
    float                       -> float
    bool                        -> multiplechoice "true"/"false"
    any type with choices       -> multiplechoice (the choices as text)
    list with choices           -> multiselect
    required                    -> required
    default                     -> default only with --defaults (see below); always quoted in the description;
                                   a Jinja default ("{{ ... }}", computed per host by the role) never is
Options no survey question can carry (dict, list without choices, nested options) are left out and named on
stderr: a survey answer reaches the play as the exact value AWX sends (role argument validation checks types but
does not convert), so a comma-separated string would stay a string where the role expects a list.

Why defaults are off unless --defaults is given: AWX adds every survey default to the job's extra vars at each
launch (awx/main/models/mixins.py, _update_unified_job_kwargs), and extra vars beat inventory group_vars. A survey
that carries the role defaults would silently override the per-group settings of a fleet inventory. Without
--defaults an unanswered optional question sends nothing on current AWX, and the inventory or role default
applies; AWX releases before ansible/awx#16289 may send an empty value for an unanswered text question, so keep
surveys to the variables you really want to ask for (--only / --exclude).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import json
import os
import re
import sys

import yaml

TEXT_TYPES = ("str", "path", "raw", "bytes", "bits")
# types a survey answer (a string) fits without further thought; raw fits only when the user says so (--only)
PLAIN_TEXT_TYPES = ("str", "path", "bytes", "bits")
# ansible-doc markup that AWX would show verbatim: I(x) B(x) C(x) M(x) O(x) V(x) E(x) P(x) -> x; U(x) L(t,u) -> t
_MARKUP = re.compile(r"\b([IBCMOVEPU])\(([^()]*)\)")
_LINK = re.compile(r"\bL\(([^(),]*),[^()]*\)")


class SurveyError(Exception):
    """The argument spec cannot be turned into a survey (bad file, unknown entry point or variable)."""


def plain_text(description):
    """An argument-spec description (string or list of paragraphs) as one line of plain text."""
    if description is None:
        return ""
    if isinstance(description, (list, tuple)):
        description = " ".join(str(part) for part in description)
    text = _LINK.sub(r"\1", str(description))
    text = _MARKUP.sub(r"\2", text)
    return " ".join(text.split())


def question_name(variable, prefix):
    """containerd_runtime_set_as_default with prefix containerd_runtime_ -> 'Set as default'."""
    short = variable[len(prefix):] if prefix and variable.startswith(prefix) and variable != prefix else variable
    words = short.replace("_", " ").strip()
    return words[:1].upper() + words[1:]


def _yaml_text(value):
    """A default as a person would write it in YAML (true, [], "", 5)."""
    if isinstance(value, str):
        return json.dumps(value) if value == "" else value
    return json.dumps(value)


def _is_template(value):
    """A default the role computes with Jinja (argument-spec defaults are documentation; defaults/main.yml rules)."""
    if isinstance(value, (list, tuple)):
        return any(_is_template(item) for item in value)
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _choice_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def question(variable, option, prefix="", with_default=False, allow_raw=False):
    """One survey question for one argument-spec option, or raise ValueError saying why there is none.
    ``allow_raw``: ask for a ``type: raw`` option as text (a survey can only send it a string)."""
    if not isinstance(option, dict):
        raise ValueError("its specification is not a mapping")
    opt_type = option.get("type", "str")
    if opt_type == "raw" and not allow_raw and not option.get("choices"):
        raise ValueError("type raw takes any type but a survey sends a string; name it with --only to ask for it as "
                         "text")
    choices = option.get("choices")
    if option.get("options"):
        raise ValueError("it has sub-options (type %s); set it in the inventory instead" % opt_type)
    item = {
        "question_name": question_name(variable, prefix),
        "question_description": plain_text(option.get("description")),
        "variable": variable,
        "required": bool(option.get("required", False)),
    }
    default = option.get("default")
    if choices:
        choices = [_choice_text(choice) for choice in choices]
        if opt_type == "list":
            if option.get("elements", "str") not in TEXT_TYPES:
                raise ValueError("it is a list of %s; a multiselect answer is a list of strings" % option["elements"])
            item["type"] = "multiselect"
            default_value = "\n".join(_choice_text(choice) for choice in (default or []))
        elif opt_type in TEXT_TYPES:
            item["type"] = "multiplechoice"
            default_value = None if default is None else _choice_text(default)
        else:
            raise ValueError("it is of type %s with choices; a survey choice would reach the play as a string"
                             % opt_type)
        item["choices"] = choices
    elif opt_type == "bool":
        item["type"] = "multiplechoice"
        item["choices"] = ["true", "false"]
        default_value = None if default is None or _is_template(default) else _choice_text(bool(default))
    elif opt_type == "int":
        item["type"] = "integer"
        default_value = default
    elif opt_type == "float":
        item["type"] = "float"
        default_value = default
    elif opt_type in TEXT_TYPES:
        item["type"] = "password" if option.get("no_log") else "text"
        default_value = None if default is None else str(default)
    else:
        raise ValueError("type %s%s has no survey question type" % (
            opt_type, " (without choices)" if opt_type == "list" else ""))
    if option.get("no_log") and item["type"] != "password":
        raise ValueError("it is a secret (no_log) of type %s, which a password question cannot carry" % opt_type)
    computed = _is_template(default)
    if computed:
        # e.g. mig_simulated: "{{ 'GPUOPS_SIMULATED_GPUS' in ... }}": worked out per host by the role, so it is
        # no survey default (a bool question would turn the expression into "true" for every host)
        default_value = None
    if default is not None and item["type"] != "password":
        note = "Role default: %s%s." % ("computed per host from " if computed else "", _yaml_text(default))
        item["question_description"] = (item["question_description"] + " " + note).strip()
    if item["type"] == "multiplechoice" and opt_type == "bool":
        item["question_description"] += " (Sent as the string true/false.)"
    if with_default and default_value not in (None, "") and item["type"] != "password":
        item["default"] = default_value
    return item


def load_entry_point(path, entry_point="main"):
    """(entry point spec, role name) from a role directory or an argument_specs.yml file."""
    if os.path.isdir(path):
        role_dir = path
        spec_file = None
        for candidate in ("argument_specs.yml", "argument_specs.yaml", "main.yml", "main.yaml"):
            candidate_path = os.path.join(path, "meta", candidate)
            if os.path.exists(candidate_path):
                spec_file = candidate_path
                break
        if spec_file is None:
            raise SurveyError("%s has no meta/argument_specs.yml" % path)
    else:
        spec_file = path
        role_dir = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    try:
        with open(spec_file, encoding="utf-8") as handle:
            data = yaml.safe_load(handle) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SurveyError("cannot read %s: %s" % (spec_file, exc))
    specs = data.get("argument_specs") if isinstance(data, dict) else None
    if not isinstance(specs, dict) or not specs:
        raise SurveyError("%s has no argument_specs mapping" % spec_file)
    if entry_point not in specs:
        raise SurveyError("%s has no entry point %r; it has: %s" % (spec_file, entry_point, ", ".join(sorted(specs))))
    return specs[entry_point] or {}, os.path.basename(os.path.normpath(role_dir))


def build_survey(spec, role, only=None, exclude=None, with_defaults=False, name=None, description=None):
    """(survey_spec dict, [(variable, reason) left out]) for one argument-spec entry point."""
    options = spec.get("options") or {}
    unknown = sorted((set(only or []) | set(exclude or [])) - set(options))
    if unknown:
        raise SurveyError("not options of %s: %s (options: %s)" % (role, ", ".join(unknown), ", ".join(sorted(options))))
    prefix = role + "_"
    questions, skipped = [], []
    for variable in (only or list(options)):
        if exclude and variable in exclude:
            continue
        try:
            questions.append(question(variable, options[variable], prefix, with_defaults, allow_raw=bool(only)))
        except ValueError as exc:
            skipped.append((variable, str(exc)))
    if not questions:
        raise SurveyError("no option of %s can be a survey question (%s)" % (
            role, "; ".join("%s: %s" % pair for pair in skipped) or "it has no options"))
    survey = {
        "name": name or "gpuops.nvidia %s" % role,
        "description": description if description is not None else plain_text(spec.get("short_description")),
        "spec": questions,
    }
    return survey, skipped


def main(argv=None):
    parser = argparse.ArgumentParser(description="Generate an AWX survey spec from a role's meta/argument_specs.yml.")
    parser.add_argument("role", help="role directory (roles/<name>) or its meta/argument_specs.yml")
    parser.add_argument("--entry-point", default="main", help="argument-spec entry point (default: main)")
    parser.add_argument("--only", action="append", metavar="VAR", help="ask only for these variables (repeatable)")
    parser.add_argument("--exclude", action="append", metavar="VAR", help="leave these variables out (repeatable)")
    parser.add_argument("--defaults", action="store_true",
                        help="put role defaults into the survey (they then override inventory vars at every launch)")
    parser.add_argument("--name", help="survey name (default: 'gpuops.nvidia <role>')")
    parser.add_argument("--description", help="survey description (default: the entry point's short_description)")
    parser.add_argument("--output", "-o", help="write here instead of stdout")
    args = parser.parse_args(argv)
    try:
        spec, role = load_entry_point(args.role, args.entry_point)
        survey, skipped = build_survey(spec, role, args.only, args.exclude, args.defaults, args.name,
                                       args.description)
    except SurveyError as exc:
        sys.stderr.write("awx_survey: %s\n" % exc)
        return 2
    for variable, reason in skipped:
        sys.stderr.write("awx_survey: %s left out: %s\n" % (variable, reason))
    text = json.dumps(survey, indent=2) + "\n"
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
