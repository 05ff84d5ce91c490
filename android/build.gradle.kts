// Builds the AAR: the Kotlin SDK (bindings/kotlin: commonMain, jvmAndroidMain; this
// folder's androidMain), the uniffi-generated bindings, and libpsi_ffi.so for each ABI,
// cross-compiled by cargo-ndk. Requires the Android SDK (compileSdk 35), NDK r27+, Rust
// targets aarch64-linux-android, armv7-linux-androideabi, x86_64-linux-android and
// `cargo install cargo-ndk`. Not built on the project's CI machines: see README.md.
import org.jetbrains.kotlin.gradle.dsl.JvmTarget
import org.jetbrains.kotlin.gradle.dsl.KotlinVersion

plugins {
    id("com.android.library") version "8.7.3"
    id("org.jetbrains.kotlin.multiplatform") version "2.4.21"
}

val repo = rootDir.parentFile
val rustCore = File(repo, "rust-core")
val generated = layout.buildDirectory.dir("generated/uniffi")
val jniLibs = layout.buildDirectory.dir("rust/jniLibs")

kotlin {
    // Usable from apps on Kotlin 2.0+, as the JVM jar (bindings/kotlin/README.md, "Kotlin
    // versions"): metadata and standard library of Kotlin 2.0, dependencies a 2.0 compiler
    // reads (kotlin-stdlib 2.1.21, coroutines 1.10.2). Not built here: no Android SDK.
    coreLibrariesVersion = "2.1.21"
    compilerOptions {
        languageVersion.set(KotlinVersion.KOTLIN_2_0)
        apiVersion.set(KotlinVersion.KOTLIN_2_0)
    }
    androidTarget {
        publishLibraryVariants("release")
        compilerOptions { jvmTarget.set(JvmTarget.JVM_17) }
    }
    jvm() // the desktop artifact is built with Maven (desktop/); this keeps jvmAndroidMain honest
    applyDefaultHierarchyTemplate()
    sourceSets {
        val commonMain by getting {
            kotlin.srcDir(File(repo, "bindings/kotlin/src/commonMain/kotlin"))
            dependencies {
                implementation("org.jetbrains.kotlinx:kotlinx-coroutines-core:1.10.2")
            }
        }
        val jvmAndroidMain by creating {
            dependsOn(commonMain)
            kotlin.srcDir(File(repo, "bindings/kotlin/src/jvmAndroidMain/kotlin"))
            kotlin.srcDir(generated)
            dependencies {
                implementation("com.squareup.okhttp3:okhttp:5.5.1")
                // The generated bindings use JNA; each platform adds its own artifact below.
                compileOnly("net.java.dev.jna:jna:5.19.1")
            }
        }
        val androidMain by getting {
            dependsOn(jvmAndroidMain)
            kotlin.srcDir("src/androidMain/kotlin")
            dependencies {
                // JNA's AAR carries libjnidispatch.so for every ABI; >= 5.17 for 16 KB pages.
                implementation("net.java.dev.jna:jna:5.19.1@aar")
            }
        }
        val jvmMain by getting {
            dependsOn(jvmAndroidMain)
            dependencies { implementation("net.java.dev.jna:jna:5.19.1") }
        }
    }
}

android {
    namespace = "dev.psisdk"
    compileSdk = 35
    defaultConfig {
        minSdk = 24
        consumerProguardFiles("consumer-rules.pro")
        ndk { abiFilters += listOf("arm64-v8a", "armeabi-v7a", "x86_64") }
    }
    sourceSets["main"].manifest.srcFile("src/androidMain/AndroidManifest.xml")
    sourceSets["main"].jniLibs.srcDir(jniLibs)
    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_17
        targetCompatibility = JavaVersion.VERSION_17
    }
}

// libpsi_ffi.so for each ABI, 16 KB page aligned (Android 15+ devices with 16 KB pages).
val cargoNdk by tasks.registering(Exec::class) {
    workingDir = rustCore
    environment("RUSTFLAGS", "-C link-arg=-Wl,-z,max-page-size=16384")
    commandLine(
        "cargo", "ndk",
        "-t", "arm64-v8a", "-t", "armeabi-v7a", "-t", "x86_64",
        "-o", jniLibs.get().asFile.path,
        "build", "--release", "--locked", "-p", "psi-ffi",
    )
}

// The Kotlin bindings, generated from the built library (uniffi library mode).
val uniffiBindings by tasks.registering(Exec::class) {
    dependsOn(cargoNdk)
    workingDir = rustCore
    commandLine(
        "cargo", "run", "--locked", "-p", "uniffi-bindgen", "--",
        "generate", "--library", File(jniLibs.get().asFile, "arm64-v8a/libpsi_ffi.so").path,
        "--language", "kotlin", "--out-dir", generated.get().asFile.path, "--no-format",
    )
}

tasks.matching { it.name.startsWith("compile") && it.name.contains("Kotlin") }
    .configureEach { dependsOn(uniffiBindings) }
tasks.matching { it.name.startsWith("merge") && it.name.contains("JniLibFolders") }
    .configureEach { dependsOn(cargoNdk) }
