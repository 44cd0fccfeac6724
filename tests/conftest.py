pytest_plugins = ["tests.lab.fixtures"]
