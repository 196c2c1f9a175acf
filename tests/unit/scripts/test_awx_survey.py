"""scripts/awx_survey.py: role argument specs -> AWX survey specs that AWX accepts and the roles accept back."""
import glob
import importlib.util
import json
import os
import subprocess

import pytest
import yaml

from tests.support.ansible_run import BIN, ROOT, ansible_env

_SPEC = importlib.util.spec_from_file_location("awx_survey", os.path.join(ROOT, "scripts", "awx_survey.py"))
awx_survey = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(awx_survey)

ROLE_DIRS = sorted(os.path.dirname(os.path.dirname(path))
                   for path in glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")))

# The checks AWX's API makes when a survey spec is saved (awx/api/views/__init__.py,
# JobTemplateSurveySpec._validate_spec_data) and when a value is offered for a question
# (awx/main/models/mixins.py, SurveyJobTemplateMixin._survey_element_validation), restated so the tests can
# hold the generator to them without an AWX server.
AWX_TYPES = {"text": str, "textarea": str, "password": str, "multiplechoice": str, "multiselect": str,
             "integer": int, "float": (float, int)}


def awx_spec_errors(survey):
    errors = []
    for field, kind in (("name", str), ("description", str), ("spec", list)):
        if not isinstance(survey.get(field), kind):
            errors.append("%s missing or not %s" % (field, kind.__name__))
    if errors or not survey["spec"]:
        return errors or ["spec has no items"]
    seen = set()
    for idx, item in enumerate(survey["spec"]):
        for field in ("type", "question_name", "variable", "required"):
            kind = bool if field == "required" else str
            if not isinstance(item.get(field), kind):
                errors.append("%d: %s missing or not %s" % (idx, field, kind.__name__))
        if item.get("variable") in seen:
            errors.append("%d: duplicate variable" % idx)
        seen.add(item.get("variable"))
        qtype = item.get("type")
        if qtype not in AWX_TYPES:
            errors.append("%d: type %r" % (idx, qtype))
            continue
        if "default" in item and item["default"] != "" and (
                not isinstance(item["default"], AWX_TYPES[qtype]) or isinstance(item["default"], bool)):
            errors.append("%d: default %r is not a %s" % (idx, item["default"], qtype))
        for key in ("min", "max"):
            if key in item and item[key] is not None and not isinstance(item[key], int):
                errors.append("%d: %s must be an integer" % (idx, key))
        if qtype in ("multiplechoice", "multiselect"):
            if "choices" not in item:
                errors.append("%d: no choices" % idx)
            elif "default" in item:
                defaults = item["default"].splitlines()
                if qtype == "multiplechoice" and len(defaults) > 1:
                    errors.append("%d: several defaults" % idx)
                if any(value not in item["choices"] for value in defaults):
                    errors.append("%d: default not among the choices" % idx)
    return errors


def awx_answer_errors(item, value):
    """Why AWX would refuse (or, for a default, silently drop) ``value`` as the answer to ``item``."""
    qtype = item["type"]
    if qtype in ("text", "textarea", "password") and not isinstance(value, str):
        return ["not a string"]
    if qtype == "integer" and type(value) is not int:  # pylint: disable=unidiomatic-typecheck  # AWX's own test
        return ["not an integer"]
    if qtype == "float" and type(value) not in (float, int):  # pylint: disable=unidiomatic-typecheck
        return ["not a number"]
    if qtype == "multiselect":
        if not isinstance(value, list):
            return ["not a list"]
        return ["%r not a choice" % v for v in value if v not in item["choices"]]
    if qtype == "multiplechoice" and value not in item["choices"]:
        return ["%r not a choice" % value]
    return []


def answer_from_default(item):
    """The value AWX puts into the extra vars for an unanswered question with a default."""
    if item["type"] == "multiselect":
        return [line for line in item["default"].splitlines() if line.strip()]
    return item["default"]


SPEC = {
    "short_description": "A role with one option of each kind",
    "options": {
        "demo_path": {"type": "path", "default": "/etc/demo.toml",
                      "description": ["Where O(demo_path) lives,", "see C(demo) and L(the docs,https://x.invalid)."]},
        "demo_name": {"description": "A name.", "required": True},
        "demo_count": {"type": "int", "default": 3, "description": "How many."},
        "demo_ratio": {"type": "float", "default": 0.5, "description": "A ratio."},
        "demo_enabled": {"type": "bool", "default": False, "description": "Turn it on."},
        "demo_mode": {"type": "str", "choices": ["auto", "drop_in"], "default": "auto", "description": "V(auto)."},
        "demo_features": {"type": "list", "elements": "str", "choices": ["a", "b", "c"], "default": ["a", "c"],
                          "description": "Features."},
        "demo_token": {"type": "str", "no_log": True, "default": "s3cret", "description": "A token."},
        "demo_labels": {"type": "dict", "default": {}, "description": "Labels."},
        "demo_argv": {"type": "list", "elements": "str", "default": [], "description": "An argv."},
        "demo_level": {"type": "int", "choices": [1, 2], "default": 1, "description": "A level."},
        "demo_nested": {"type": "dict", "options": {"x": {"type": "str"}}, "description": "Nested."},
        "demo_anything": {"type": "raw", "default": None, "description": "Any value."},
        "demo_simulated": {"type": "bool", "default": "{{ 'SIM' in (demo_env | default({})) }}",
                           "description": "Computed."},
        "demo_unit_dir": {"type": "str", "default": "{{ demo_root }}/etc/systemd/system", "description": "Computed."},
    },
}


def by_variable(survey):
    return {item["variable"]: item for item in survey["spec"]}


def test_each_argument_type_maps_to_its_awx_question_type():
    survey, skipped = awx_survey.build_survey(SPEC, "demo")
    items = by_variable(survey)
    assert {v: i["type"] for v, i in items.items()} == {
        "demo_path": "text", "demo_name": "text", "demo_count": "integer", "demo_ratio": "float",
        "demo_enabled": "multiplechoice", "demo_mode": "multiplechoice", "demo_features": "multiselect",
        "demo_token": "password", "demo_simulated": "multiplechoice", "demo_unit_dir": "text"}
    assert items["demo_enabled"]["choices"] == ["true", "false"]
    assert items["demo_mode"]["choices"] == ["auto", "drop_in"]
    assert items["demo_features"]["choices"] == ["a", "b", "c"]
    assert items["demo_name"]["required"] is True and items["demo_path"]["required"] is False
    assert [i["variable"] for i in survey["spec"]][:3] == ["demo_path", "demo_name", "demo_count"]  # spec order
    assert items["demo_path"]["question_name"] == "Path"
    assert items["demo_features"]["question_name"] == "Features"
    assert survey["name"] == "gpuops.nvidia demo" and survey["description"] == "A role with one option of each kind"
    assert awx_spec_errors(survey) == []
    reasons = dict(skipped)
    assert sorted(reasons) == ["demo_anything", "demo_argv", "demo_labels", "demo_level", "demo_nested"]
    assert "--only" in reasons["demo_anything"]
    assert "list (without choices)" in reasons["demo_argv"]
    assert "dict" in reasons["demo_labels"]
    assert "string" in reasons["demo_level"]
    assert "sub-options" in reasons["demo_nested"]


def test_descriptions_are_plain_text_and_quote_the_role_default():
    items = by_variable(awx_survey.build_survey(SPEC, "demo")[0])
    assert items["demo_path"]["question_description"] == (
        "Where demo_path lives, see demo and the docs. Role default: /etc/demo.toml.")
    assert items["demo_mode"]["question_description"] == "auto. Role default: auto."
    assert "Role default: false." in items["demo_enabled"]["question_description"]
    assert "string true/false" in items["demo_enabled"]["question_description"]
    assert items["demo_name"]["question_description"] == "A name."
    # a secret's default is never shown
    assert "s3cret" not in json.dumps(items["demo_token"])


def test_no_defaults_unless_asked_because_awx_sends_them_as_extra_vars():
    items = by_variable(awx_survey.build_survey(SPEC, "demo")[0])
    assert not [v for v, i in items.items() if "default" in i]


def test_with_defaults_each_default_is_what_awx_accepts():
    survey = awx_survey.build_survey(SPEC, "demo", with_defaults=True)[0]
    items = by_variable(survey)
    assert items["demo_path"]["default"] == "/etc/demo.toml"
    assert items["demo_count"]["default"] == 3
    assert items["demo_ratio"]["default"] == 0.5
    assert items["demo_enabled"]["default"] == "false"
    assert items["demo_mode"]["default"] == "auto"
    assert items["demo_features"]["default"] == "a\nc"
    assert "default" not in items["demo_token"]  # a password default would be stored by AWX: never generated
    assert "default" not in items["demo_name"]   # required, no default in the spec
    # a default the role computes per host is never a survey default (bool("{{ ... }}") would be "true" everywhere)
    assert "default" not in items["demo_simulated"] and "default" not in items["demo_unit_dir"]
    assert "Role default: computed per host from {{ 'SIM' in" in items["demo_simulated"]["question_description"]
    assert awx_spec_errors(survey) == []
    for item in survey["spec"]:
        if "default" in item:
            assert awx_answer_errors(item, answer_from_default(item)) == [], item


def test_only_and_exclude_pick_questions_and_unknown_names_are_refused():
    survey = awx_survey.build_survey(SPEC, "demo", only=["demo_mode", "demo_count"])[0]
    assert [i["variable"] for i in survey["spec"]] == ["demo_mode", "demo_count"]
    # a raw option is asked for (as text) only when named
    raw_item = by_variable(awx_survey.build_survey(SPEC, "demo", only=["demo_anything"])[0])["demo_anything"]
    assert raw_item["type"] == "text" and "default" not in raw_item
    survey = awx_survey.build_survey(SPEC, "demo", exclude=["demo_path", "demo_token"])[0]
    assert "demo_path" not in by_variable(survey) and "demo_token" not in by_variable(survey)
    with pytest.raises(awx_survey.SurveyError, match="not options of demo: demo_typo"):
        awx_survey.build_survey(SPEC, "demo", only=["demo_typo"])
    with pytest.raises(awx_survey.SurveyError, match="no option of demo can be a survey question"):
        awx_survey.build_survey(SPEC, "demo", only=["demo_labels"])


@pytest.mark.parametrize("role_dir", ROLE_DIRS, ids=os.path.basename)
def test_every_role_gives_a_survey_awx_accepts(role_dir):
    spec, role = awx_survey.load_entry_point(role_dir)
    for with_defaults in (False, True):
        survey, skipped = awx_survey.build_survey(spec, role, with_defaults=with_defaults)
        assert awx_spec_errors(survey) == []
        options = spec["options"]
        assert sorted([i["variable"] for i in survey["spec"]] + [v for v, _why in skipped]) == sorted(options)
        for item in survey["spec"]:
            assert item["variable"].startswith(role + "_")
            if "default" in item:
                assert awx_answer_errors(item, answer_from_default(item)) == []


def test_survey_answers_pass_the_roles_own_argument_validation(tmp_path):
    """What AWX passes (the survey answers as extra vars, booleans as "true"/"false") is accepted by ansible-core's
    role argument validation, run for real with each role's meta/argument_specs.yml."""
    tasks, answers = [], {}
    for role_dir in ROLE_DIRS:
        spec, role = awx_survey.load_entry_point(role_dir)
        survey = awx_survey.build_survey(spec, role, with_defaults=True)[0]
        for item in survey["spec"]:
            if "default" in item:
                answers[item["variable"]] = answer_from_default(item)
            elif item["type"] == "multiplechoice":
                answers[item["variable"]] = item["choices"][-1]
        spec_file = os.path.join(role_dir, "meta", "argument_specs.yml")
        with open(spec_file) as handle:
            argument_spec = yaml.safe_load(handle)["argument_specs"]["main"]["options"]
        # spec defaults are documentation for roles (values come from defaults/main.yml), and a Jinja default
        # such as "{{ mig_root }}/etc" would be templated here as task arguments
        argument_spec = {name: {k: v for k, v in option.items() if k != "default"}
                         for name, option in argument_spec.items()}
        provided = sorted(v for v in answers if v.startswith(role + "_"))
        tasks.append({"name": "validate %s" % role, "ansible.builtin.validate_argument_spec": {
            "argument_spec": argument_spec,
            "provided_arguments": {v: "{{ %s }}" % v for v in provided}}})
    assert answers, "no survey answers to check"
    playbook = tmp_path / "validate.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    extra = tmp_path / "answers.json"
    extra.write_text(json.dumps(answers))
    out = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local",
                          str(playbook), "-e", "@%s" % extra], env=ansible_env(), cwd=str(tmp_path),
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Validation of arguments failed" not in out.stdout


def test_command_line_writes_json_and_explains_what_it_left_out(tmp_path, capsys):
    role_dir = tmp_path / "roles" / "demo"
    (role_dir / "meta").mkdir(parents=True)
    (role_dir / "meta" / "argument_specs.yml").write_text(yaml.safe_dump({"argument_specs": {"main": SPEC}}))
    target = tmp_path / "survey.json"
    assert awx_survey.main([str(role_dir), "--defaults", "-o", str(target), "--name", "GPU fleet"]) == 0
    survey = json.loads(target.read_text())
    assert survey["name"] == "GPU fleet" and awx_spec_errors(survey) == []
    assert by_variable(survey)["demo_count"]["default"] == 3
    assert "demo_labels left out: type dict" in capsys.readouterr().err

    assert awx_survey.main([str(role_dir / "meta" / "argument_specs.yml"), "--only", "demo_mode"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [i["variable"] for i in printed["spec"]] == ["demo_mode"]


@pytest.mark.parametrize("argv,message", [
    (["--entry-point", "other"], "has no entry point 'other'; it has: main"),
    (["--only", "nope"], "not options of demo: nope"),
])
def test_command_line_errors_say_what_is_wrong(tmp_path, capsys, argv, message):
    role_dir = tmp_path / "demo"
    (role_dir / "meta").mkdir(parents=True)
    (role_dir / "meta" / "argument_specs.yml").write_text(yaml.safe_dump({"argument_specs": {"main": SPEC}}))
    assert awx_survey.main([str(role_dir)] + argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


def test_a_role_without_argument_specs_is_refused(tmp_path, capsys):
    (tmp_path / "bare" / "tasks").mkdir(parents=True)
    assert awx_survey.main([str(tmp_path / "bare")]) == 2
    assert "has no meta/argument_specs.yml" in capsys.readouterr().err
