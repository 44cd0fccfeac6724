# Packer 1.7 and later install the QEMU builder as a plugin (`packer init`). Packer 1.6 has it built in
# and rejects this block, so the role places this file beside the template only where `init` exists.
packer {
  required_plugins {
    qemu = {
      version = ">= 1.0.9"
      source  = "github.com/hashicorp/qemu"
    }
  }
}
