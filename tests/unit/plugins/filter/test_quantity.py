import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.goldenimage.pipeline.plugins.filter.quantity import quantity_bytes


def test_binary_and_decimal_quantities():
    assert quantity_bytes("8Gi") == 8 * 1024**3
    assert quantity_bytes("512Mi") == 512 * 1024**2
    assert quantity_bytes("4G") == 4 * 1000**3


@pytest.mark.parametrize("value", ["8GB", "", "lots"])
def test_anything_else_names_the_option(value):
    with pytest.raises(AnsibleFilterError, match=r"windows_bake_memory: .* is not a Kubernetes quantity"):
        quantity_bytes(value, "windows_bake_memory")


def test_positive_seconds():
    from ansible_collections.goldenimage.pipeline.plugins.filter.quantity import positive_seconds

    assert positive_seconds(1800, "t") == 1800 and positive_seconds("5", "t") == 5
    for value in (0, -1, "0", "soon", True):
        with pytest.raises(AnsibleFilterError, match="option linux_golden_import_timeout"):
            positive_seconds(value, "linux_golden_import_timeout")
