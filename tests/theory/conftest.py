import pytest
import torch


@pytest.fixture(autouse=True)
def _single_thread():
    """The dense Kronecker checks are small; one thread avoids contention on shared CPUs."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
