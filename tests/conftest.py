pytest_plugins = ["tests.lab.fixtures", "tests.suites"]
