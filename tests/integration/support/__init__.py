# How long a test's arrangement may take to settle in the lab (a VM to boot, a claim to bind, a snapshot
# to become ready) before the test gives up. It bounds a wait, it asserts no speed: on a loaded two-core
# runner with two test workers the lab's controllers can fall far behind their usual second.
SETTLE_SECONDS = 120
