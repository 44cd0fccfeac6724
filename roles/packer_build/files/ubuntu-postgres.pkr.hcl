# Baked PostgreSQL image: an Ubuntu cloud image booted in QEMU, provisioned over SSH, sealed, shut down.
# Values come from build.pkrvars.json, written by the packer_build role. Works with Packer 1.6
# (built-in QEMU builder); newer Packer also reads plugins.pkr.hcl placed beside this file.

variable "base_image" {
  type        = string
  description = "URL or local path of the Ubuntu cloud image (qcow2)."
}

variable "base_image_checksum" {
  type        = string
  description = "Checksum of the base image, \"sha256:<hex>\" or \"file:<url of a SUMS file>\"."
}

variable "output_directory" {
  type = string
}

variable "vm_name" {
  type = string
}

variable "disk_size" {
  type    = string
  default = "8G"
}

variable "memory" {
  type    = number
  default = 2048
}

variable "cpus" {
  type    = number
  default = 2
}

variable "accelerator" {
  type    = string
  default = "tcg"
}

variable "headless" {
  type    = bool
  default = true
}

variable "qemu_binary" {
  type    = string
  default = "qemu-system-x86_64"
}

variable "http_directory" {
  type        = string
  description = "Directory served to the VM as its cloud-init NoCloud seed (user-data, meta-data)."
}

variable "ssh_username" {
  type    = string
  default = "packer"
}

variable "ssh_private_key_file" {
  type = string
}

variable "ssh_timeout" {
  type    = string
  default = "30m"
}

variable "provision_script" {
  type = string
}

variable "ca_bundle" {
  type        = string
  description = "CA bundle uploaded into the VM; an empty file means none."
}

variable "build_manifest" {
  type        = string
  description = "Where the build manifest written inside the VM is downloaded to."
}

variable "revision" {
  type = string
}

variable "os_version" {
  type = string
}

variable "pg_versions" {
  type = list(string)
}

variable "pg_repo" {
  type    = string
  default = "pgdg"
}

variable "pgdg_url" {
  type    = string
  default = "https://apt.postgresql.org/pub/repos/apt"
}

variable "pgdg_key_url" {
  type    = string
  default = "https://www.postgresql.org/media/keys/ACCC4CF8.asc"
}

variable "ssh_host_key_types" {
  type    = list(string)
  default = ["ed25519", "ecdsa"]
}

variable "initramfs_modules" {
  type    = string
  default = "dep"
}

variable "cloud_init_datasource" {
  type    = string
  default = "nocloud"
}

locals {
  guest_manifest = "/etc/goldenimage/build-manifest.json"
  guest_ca       = "/tmp/goldenimage-build-ca.crt"
  provision_env = [
    "PG_VERSIONS=${join(" ", var.pg_versions)}",
    "OS_VERSION=${var.os_version}",
    "PG_REPO=${var.pg_repo}",
    "PGDG_URL=${var.pgdg_url}",
    "PGDG_KEY_URL=${var.pgdg_key_url}",
    "BUILD_USER=${var.ssh_username}",
    "REVISION=${var.revision}",
    "CA_BUNDLE=${local.guest_ca}",
    "MANIFEST=${local.guest_manifest}",
    "SSH_HOST_KEY_TYPES=${join(" ", var.ssh_host_key_types)}",
    "INITRAMFS_MODULES=${var.initramfs_modules}",
    "CLOUD_INIT_DATASOURCE=${var.cloud_init_datasource}",
  ]
  # Root runs the script with the settings above; sudo must not reset them.
  sudo_command = "sudo -n env {{ .Vars }} bash '{{ .Path }}'"
}

source "qemu" "ubuntu_postgres" {
  iso_url          = var.base_image
  iso_checksum     = var.base_image_checksum
  disk_image       = true
  format           = "qcow2"
  disk_size        = var.disk_size
  disk_interface   = "virtio"
  net_device       = "virtio-net"
  accelerator      = var.accelerator
  qemu_binary      = var.qemu_binary
  headless         = var.headless
  cpus             = var.cpus
  memory           = var.memory
  output_directory = var.output_directory
  vm_name          = var.vm_name
  http_directory   = var.http_directory
  # cloud-init's NoCloud datasource reads the seed from Packer's HTTP server.
  qemuargs = [
    ["-smbios", "type=1,serial=ds=nocloud-net;s=http://{{ .HTTPIP }}:{{ .HTTPPort }}/"],
  ]
  communicator         = "ssh"
  ssh_username         = var.ssh_username
  ssh_private_key_file = var.ssh_private_key_file
  ssh_timeout          = var.ssh_timeout
  # The build user is removed on the way down, after its last use of sudo.
  shutdown_command = "sudo -n sh -c 'rm -f /etc/sudoers.d/90-cloud-init-users; userdel -rf ${var.ssh_username}; poweroff'"
  shutdown_timeout = "5m"
}

build {
  sources = ["source.qemu.ubuntu_postgres"]

  provisioner "file" {
    source      = var.ca_bundle
    destination = local.guest_ca
  }

  provisioner "shell" {
    script           = var.provision_script
    execute_command  = "${local.sudo_command} install"
    environment_vars = local.provision_env
  }

  provisioner "file" {
    direction   = "download"
    source      = local.guest_manifest
    destination = var.build_manifest
  }

  provisioner "shell" {
    script           = var.provision_script
    execute_command  = "${local.sudo_command} seal"
    environment_vars = local.provision_env
  }
}
