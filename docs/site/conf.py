# Sphinx configuration of gpuops.nvidia's documentation site (`make docs`, scripts/publish_check.py). The RST comes
# from antsibull-docs (`antsibull-docs collection --use-current`), as on docs.ansible.com; this file is the
# configuration `antsibull-docs sphinx-init` writes, with two changes: no intersphinx (the build must work without the
# network: CI reaches only the package registries), and the Ansible labels the generated pages link to (ANSIBLE_LABELS)
# resolved to their pages on docs.ansible.com instead. Any other unresolved reference still fails the build (-W, nitpicky).
# pylint: disable=invalid-name
from docutils import nodes

project = "gpuops.nvidia"
copyright = "gpuops.nvidia contributors"  # noqa: A001  (Sphinx's name for it)
title = "gpuops.nvidia"
html_short_title = "gpuops.nvidia"

extensions = ["sphinx_antsibull_ext"]
pygments_style = "ansible"
highlight_language = "YAML+Jinja"
html_theme = "sphinx_ansible_theme"
html_show_sphinx = False
display_version = False
html_use_smartypants = True
html_use_modindex = False
html_use_index = False
html_copy_source = False
default_role = "any"
nitpicky = True

ANSIBLE_DOCS = "https://docs.ansible.com/ansible/latest/"
ANSIBLE_LABELS = {
    "common_return_values": ANSIBLE_DOCS + "reference_appendices/common_return_values.html",
    "ansible_configuration_settings": ANSIBLE_DOCS + "reference_appendices/config.html",
    # the note on a module that has an action plugin (gpu_node_plan)
    "action_plugins": ANSIBLE_DOCS + "plugins/action.html",
}


def ansible_label(app, env, node, contnode):
    """Resolve a :ref: to one of ANSIBLE_LABELS as a link to docs.ansible.com; leave every other target unresolved."""
    if node.get("reftype") != "ref" or node.get("reftarget") not in ANSIBLE_LABELS:
        return None
    link = nodes.reference("", "", internal=False, refuri=ANSIBLE_LABELS[node["reftarget"]])
    link += contnode
    return link


def setup(app):
    app.connect("missing-reference", ansible_label)
